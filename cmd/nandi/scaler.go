package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nandi-go/nandi/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

// nandi scaler serves each group's backlog in entries for KEDA's
// metrics-api scaler (GET /keda/GROUP, {"entries": N, ...}: valueLocation
// "entries") and for Prometheus (GET /metrics: nandi_group_lag_entries per
// group and shard, once per group however many workers run). It reads the
// ledger and the log, so a group with every worker stopped still has its
// backlog, and KEDA scales it up from zero on its first entry.
//
// Why metrics-api and not KEDA's external (gRPC) scaler: it needs no gRPC
// or KEDA code in anyone's build, the same answer serves curl, Prometheus
// and KEDA, and the push that external-push adds (StreamIsActive) saves at
// most one polling interval, which is small beside a pod's start.

// scalerEvery is the least time between two readings of one group: KEDA's
// polls, its HPA's and Prometheus's scrapes share a reading that young.
const scalerEvery = time.Second

// scaler answers for groups, a reading per group at most every `every`.
type scaler struct {
	lease redis.UniversalClient
	logs  *logs
	every time.Duration
	only  []string // -group: the groups /metrics reports (all with a recorded log when empty)
	log   *slog.Logger

	mu       sync.Mutex
	readings map[string]*reading
}

type reading struct {
	mu  sync.Mutex // one reading of a group at a time
	at  time.Time
	b   *Backlog
	err error
}

// backlog returns group's backlog, read again when the last reading is
// older than s.every.
func (s *scaler) backlog(ctx context.Context, group string) (*Backlog, error) {
	s.mu.Lock()
	r := s.readings[group]
	if r == nil {
		r = &reading{}
		s.readings[group] = r
	}
	s.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.at.IsZero() && time.Since(r.at) < s.every {
		return r.b, r.err
	}
	r.b, r.err = readBacklog(ctx, s.lease, s.logs, group)
	r.at = time.Now()
	switch {
	case errors.Is(r.err, errNoLog):
		// A name no worker recorded a log for is not kept: any name can be
		// asked for, and the readings of names would grow without bound.
		s.mu.Lock()
		if s.readings[group] == r {
			delete(s.readings, group)
		}
		s.mu.Unlock()
	case r.err != nil:
		s.log.WarnContext(ctx, "cannot count the group's backlog", "group", group, "err", r.err)
	}
	return r.b, r.err
}

func (s *scaler) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /keda/{group}", s.serveGroup)
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewBacklogCollector(s.collect, metrics.Options{}))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := s.lease.Ping(r.Context()).Err(); err != nil {
			http.Error(w, "cannot reach the lease's Redis: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	return mux
}

// serveGroup answers KEDA's metrics-api scaler: 200 and the backlog as
// JSON; 404 for a group no worker has recorded its log for (with a
// ScaledObject's fallback, KEDA then runs fallback.replicas, and the
// first worker records it); 503 when the log or Redis cannot be read.
func (s *scaler) serveGroup(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	b, err := s.backlog(r.Context(), group)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	switch {
	case errors.Is(err, errNoLog):
		w.WriteHeader(http.StatusNotFound)
	case err != nil:
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	if err != nil {
		json.NewEncoder(w).Encode(map[string]string{"group": group, "error": err.Error()})
		return
	}
	json.NewEncoder(w).Encode(b)
}

// collect reads the backlog of every group /metrics reports (s.only, or
// every group with a recorded log), for metrics.NewBacklogCollector.
func (s *scaler) collect(ctx context.Context) []metrics.Backlog {
	groups := s.only
	if len(groups) == 0 {
		var err error
		if groups, err = findGroups(ctx, s.lease, []string{"ledger:log"}); err != nil {
			s.log.Warn("cannot list the groups", "err", err)
			return nil
		}
	}
	out := make([]metrics.Backlog, 0, len(groups))
	for _, g := range groups {
		b, err := s.backlog(ctx, g)
		mb := metrics.Backlog{Group: g, Err: err}
		if err == nil {
			for _, sh := range b.Shards {
				mb.Shards = append(mb.Shards, metrics.ShardBacklog{Shard: sh.Shard, Source: sh.Source, Entries: sh.Entries})
			}
		}
		out = append(out, mb)
	}
	return out
}

func cmdScaler(ctx context.Context, args []string, out, errOut io.Writer) int {
	f := newFlags("scaler", out, errOut)
	redisURL := f.redisURL("the groups' leases and ledgers")
	logRedis := f.String("log-redis", "", "the Redis of the groups' streams, when not the lease's")
	kafka := f.String("kafka", "", "Kafka brokers host:port[,host:port...], for groups that read a topic (plaintext)")
	natsURL := f.String("nats", "", "a NATS URL, for groups that read a JetStream stream")
	addr := f.String("addr", "127.0.0.1:9108", "where to listen (in a pod: :9108)")
	groups := f.String("group", "", "GROUP[,GROUP...]: the groups /metrics reports (default every group with a recorded log)")
	every := f.Duration("every", scalerEvery, "the least time between two readings of a group")
	if code, ok := f.parse(args); !ok {
		return code
	}
	if *every <= 0 {
		return f.usageError("-every %v: it must be positive", *every)
	}
	c, err := connect(ctx, *redisURL)
	if err != nil {
		return f.failed(err)
	}
	defer c.Close()
	l := &logs{redis: c, natsURL: *natsURL}
	defer l.close()
	if *logRedis != "" {
		lc, err := connect(ctx, *logRedis)
		if err != nil {
			return f.failed(err)
		}
		defer lc.Close()
		l.redis = lc
	}
	if *kafka != "" {
		l.kafka = strings.Split(*kafka, ",")
	}
	s := &scaler{lease: c, logs: l, every: *every, log: slog.New(slog.NewTextHandler(errOut, nil)), readings: map[string]*reading{}}
	if *groups != "" {
		s.only = strings.Split(*groups, ",")
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return f.failed(fmt.Errorf("cannot listen on %s: %v", *addr, err))
	}
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(out, "nandi scaler on http://%s: /keda/GROUP for KEDA's metrics-api scaler, /metrics for Prometheus\n", ln.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return f.failed(err)
	}
	return exitOK
}
