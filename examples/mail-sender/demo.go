package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/smtp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/health"
	"github.com/nandi-go/nandi/metrics"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

// env is where the demo runs: a Redis and an SMTP server, real or embedded.
type env struct {
	newClient func() *redis.Client
	smtpAddr  string
	sink      *sink // nil with -smtp: then the report counts what was sent
	close     func()
}

func setup(cfg config) (*env, error) {
	e := &env{close: func() {}}
	if cfg.redisURL == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return nil, err
		}
		e.newClient = func() *redis.Client { return redis.NewClient(&redis.Options{Addr: mr.Addr()}) }
		prev := e.close
		e.close = func() { prev(); mr.Close() }
	} else {
		opts, err := redis.ParseURL(cfg.redisURL)
		if err != nil {
			return nil, fmt.Errorf("-redis %q: %w", cfg.redisURL, err)
		}
		e.newClient = func() *redis.Client { return redis.NewClient(opts) }
	}
	if cfg.smtpAddr == "" {
		s, err := startSink()
		if err != nil {
			e.close()
			return nil, err
		}
		e.sink, e.smtpAddr = s, s.addr()
		prev := e.close
		e.close = func() { s.close(); prev() }
	} else {
		e.smtpAddr = cfg.smtpAddr
	}
	return e, nil
}

func messageID(key string) string { return "<mail-" + key + "@nandi.example>" }

// send sends one mail over SMTP, within ctx: the handler's context ends
// when the lease runs out, and the mail must not go out after that.
//
// The mail's effect boundary is the server's reply to DATA (wc.Close):
// once the server has accepted the message, the mail is sent, and nothing
// after that is a failure of the task. QUIT is a courtesy: its error (the
// context ending in between, a server that hangs up first) is not
// returned, or the task would be done again and the mail sent twice.
//
// The end of DATA (the final dot) is sent only while ctx lasts; once it is
// sent, the server's reply is awaited whatever ctx does (up to
// replyTimeout): abandoning it would leave unknown whether the mail went
// out, and the next holder would send it again.
func send(ctx context.Context, addr string, m *transport.Message) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) }) // cancelled: unblock at once
	defer stop()
	host, _, _ := net.SplitHostPort(addr)
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		return err
	}
	defer c.Close()
	to := "customer-" + m.Key + "@example.com"
	if err := c.Mail("outbox@nandi.example"); err != nil {
		return err
	}
	if err := c.Rcpt(to); err != nil {
		return err
	}
	wc, err := c.Data()
	if err != nil {
		return err
	}
	msg := "From: outbox@nandi.example\r\nTo: " + to + "\r\nMessage-Id: " + messageID(m.Key) +
		"\r\nSubject: your order\r\n\r\n" + string(m.Payload) + "\r\n"
	if _, err := io.WriteString(wc, msg); err != nil {
		return err
	}
	if !stop() || ctx.Err() != nil { // the context ended: do not send the dot
		return context.Cause(ctx)
	}
	_ = conn.SetDeadline(time.Now().Add(replyTimeout))
	if err := wc.Close(); err != nil {
		return err // not accepted: the mail was not sent
	}
	// Sent. Past the effect boundary: cleanup errors are not failures.
	_ = c.Quit()
	return nil
}

// replyTimeout bounds the wait for the server's reply to the end of DATA,
// which send awaits even after its context has ended.
const replyTimeout = 10 * time.Second

// claim records that the holder of token sends mail key: a SET fenced by
// the token, which refuses a holder older than the last one to claim the
// mail (0). A worker that outlived its term (paused, or a handler that ran
// past its deadline) then cannot send a mail its successor has taken over.
// A mail already recorded as sent (KEYS[2]) is refused too (2): its
// sender's term may have ended between the server's acceptance and the
// handler's return, and the next holder must not send it again. 1: send.
var claim = redis.NewScript(`
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 2 end
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) < cur then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1`)

// produce writes n mails into the outbox at rate per second.
func produce(ctx context.Context, c *redis.Client, stream string, first, n, rate int) error {
	tick := time.NewTicker(time.Second / time.Duration(max(rate, 1)) * 10)
	defer tick.Stop()
	for i := first; i < first+n; {
		p := c.Pipeline()
		for j := 0; j < 10 && i < first+n; j, i = j+1, i+1 {
			p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"id", i, "payload", fmt.Sprintf("Dear customer %d, your order has shipped.", i)}})
		}
		if _, err := p.Exec(ctx); err != nil {
			return fmt.Errorf("writing the outbox: %w", err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// worker is one member of the fleet: its own client, lease and consumer.
type worker struct {
	id     int
	lease  *partition.Lease
	c      *consumer.Consumer
	client *redis.Client
	cancel context.CancelFunc
	done   chan error
	sent   atomic.Int64
	held   atomic.Bool // has held a lease at least once
}

func startWorker(id int, e *env, cfg config) (*worker, error) {
	w := &worker{id: id, client: e.newClient(), done: make(chan error, 1)}
	l, err := partition.New(w.client, partition.Options{Name: cfg.group, Interval: cfg.interval})
	if err != nil {
		return nil, err
	}
	src, err := redisstream.New(w.client, cfg.stream, redisstream.Options{})
	if err != nil {
		return nil, err
	}
	claims, sent := partition.KeyPrefix(cfg.group)+"claims", partition.KeyPrefix(cfg.group)+"sent"
	h := func(ctx context.Context, m *transport.Message) error {
		a, _ := consumer.AssignmentFromContext(ctx) // the term this task runs under
		got, err := claim.Run(ctx, w.client, []string{claims, sent}, m.Key, a.Token).Int()
		if err != nil {
			return err
		}
		if got != 1 {
			return nil // a newer holder has this mail, or it was sent: not ours to send
		}
		if err := send(ctx, e.smtpAddr, m); err != nil {
			return err
		}
		// ---- effect boundary: the mail is sent ----
		// Recorded even if the term has just ended, so that no later
		// holder sends it again; a failure here is not the task's.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replyTimeout)
		_ = w.client.HSet(rctx, sent, m.Key, a.Token).Err()
		cancel()
		w.sent.Add(1)
		return nil
	}
	c, err := consumer.New(l, src, h, consumer.Options{Concurrency: 4})
	if err != nil {
		return nil, err
	}
	w.lease, w.c = l, c
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go func() { w.done <- c.Run(ctx) }()
	return w, nil
}

// stop is a clean stop, as SIGTERM: drain, checkpoint, leave.
func (w *worker) stop() error {
	w.cancel()
	err := <-w.done
	_ = w.client.Close()
	return err
}

// state is what the live view shows for a worker.
func (w *worker) state() string {
	if a, ok := w.lease.Current(); ok {
		w.held.Store(true)
		return fmt.Sprintf("owning %d of %d", a.Index, a.Replicas)
	}
	if w.held.Load() {
		return "standing down"
	}
	return "joining"
}

type report struct {
	Mails, Received, Duplicates, Missing int
	FromSink                             bool
	StandDown                            time.Duration
	Rebalances                           int
	Replicas                             []string
	Took                                 time.Duration
	// Lost says, for each missing mail, what the group's keys say of it
	// (its claim and whether it is recorded as sent), to find why.
	Lost []string
}

func (r report) ok() bool { return r.Duplicates == 0 && r.Missing == 0 }

func (r report) print(out io.Writer) {
	src := "the SMTP sink received"
	if !r.FromSink {
		src = "the workers sent (a real SMTP server: nandi cannot see what it received)"
	}
	fmt.Fprintf(out, "\nreport (%s)\n", src)
	fmt.Fprintf(out, "  mails:          %d\n", r.Mails)
	fmt.Fprintf(out, "  delivered:      %d\n", r.Received)
	fmt.Fprintf(out, "  duplicates:     %d\n", r.Duplicates)
	fmt.Fprintf(out, "  missing:        %d\n", r.Missing)
	for _, l := range r.Lost {
		fmt.Fprintf(out, "    %s\n", l)
	}
	fmt.Fprintf(out, "  standing down:  %v (summed over workers)\n", r.StandDown.Round(time.Millisecond))
	fmt.Fprintf(out, "  rebalances:     %d (replicas over time: %s)\n", r.Rebalances, strings.Join(r.Replicas, " -> "))
	fmt.Fprintf(out, "  took:           %v, %.0f mails/s\n", r.Took.Round(time.Millisecond), float64(r.Received)/r.Took.Seconds())
	if r.ok() {
		fmt.Fprintln(out, "  result:         OK, every mail exactly once")
	} else {
		fmt.Fprintln(out, "  result:         FAILED")
	}
}

// fleet is the demo's set of workers and the view of them.
type fleet struct {
	e     *env
	cfg   config
	out   io.Writer
	mu    sync.Mutex
	ws    []*worker
	next  int
	total atomic.Int64 // sent by stopped workers

	standDown   time.Duration
	replicas    []string
	lastLine    map[int]string
	lastR       int
	rebalances  int
	candidate   int           // a size most holders hold, not yet lasted
	seen        int           // samples it has lasted
	candidateAt time.Duration // when it was first seen
}

func (f *fleet) resize(n int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.ws) < n {
		f.next++
		w, err := startWorker(f.next, f.e, f.cfg)
		if err != nil {
			return err
		}
		f.ws = append(f.ws, w)
	}
	for len(f.ws) > n {
		w := f.ws[len(f.ws)-1]
		f.ws = f.ws[:len(f.ws)-1]
		if err := w.stop(); err != nil {
			return fmt.Errorf("worker %d: %w", w.id, err)
		}
		f.total.Add(w.sent.Load())
	}
	return nil
}

func (f *fleet) sent() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.total.Load()
	for _, w := range f.ws {
		n += w.sent.Load()
	}
	return n
}

// observe samples the fleet: stand-down time, replicas over time, and the
// view (redrawn on a terminal, state changes as lines otherwise).
func (f *fleet) observe(step time.Duration, start time.Time, draw bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var r int
	var lines []string
	for _, w := range f.ws {
		st := w.state()
		if st == "standing down" {
			f.standDown += step
		}
		line := fmt.Sprintf("worker %-2d %-16s %5d sent", w.id, st, w.sent.Load())
		lines = append(lines, line)
		if f.cfg.plain && f.lastLine[w.id] != st {
			fmt.Fprintf(f.out, "%6.2fs worker %d: %s\n", time.Since(start).Seconds(), w.id, st)
		}
		f.lastLine[w.id] = st
	}
	// The group's size is what most holders hold, once it has lasted two
	// samples: during a handover old and new holders differ for a moment,
	// which is one change, not several.
	if r = mostHeld(f.ws); r != 0 && r != f.lastR {
		if r == f.candidate {
			f.seen++
		} else {
			f.candidate, f.seen, f.candidateAt = r, 1, time.Since(start)
		}
		if f.seen >= 2 {
			if f.lastR != 0 {
				f.rebalances++
			}
			f.lastR = r
			f.replicas = append(f.replicas, fmt.Sprintf("%d (%.1fs)", r, f.candidateAt.Seconds()))
		}
	}
	if draw && !f.cfg.plain {
		fmt.Fprint(f.out, "\033[H\033[2J")
		fmt.Fprintf(f.out, "nandi mail-sender  %.1fs  group of %d  replicas %d  sent %d\n\n", time.Since(start).Seconds(), len(f.ws), f.lastR, f.total.Load()+sum(f.ws))
		for _, l := range lines {
			fmt.Fprintln(f.out, l)
		}
	}
}

func sum(ws []*worker) int64 {
	var n int64
	for _, w := range ws {
		n += w.sent.Load()
	}
	return n
}

// demo runs the producer, the fleet on its schedule and the report.
func demo(ctx context.Context, cfg config, out io.Writer) (report, error) {
	e, err := setup(cfg)
	if err != nil {
		return report{}, err
	}
	defer e.close()
	if cfg, err = freshNames(ctx, e, cfg, out); err != nil {
		return report{}, err
	}
	fmt.Fprintf(out, "mail-sender: %d mails, fleet %v, phases of %v, interval %v, SMTP %s\n", cfg.mails, cfg.schedule, cfg.phase, cfg.interval, e.smtpAddr)
	start := time.Now()
	prod := e.newClient()
	defer prod.Close()
	produced := make(chan error, 1)
	go func() { produced <- produce(ctx, prod, cfg.stream, 0, cfg.mails, cfg.rate) }()

	f := &fleet{e: e, cfg: cfg, out: out, lastLine: map[int]string{}}
	const step = 20 * time.Millisecond
	tick := time.NewTicker(step)
	defer tick.Stop()
	wait := func(d time.Duration, until func() bool) {
		end := time.Now().Add(d)
		for n := 0; time.Now().Before(end) && ctx.Err() == nil && (until == nil || !until()); n++ {
			<-tick.C
			f.observe(step, start, n%10 == 0)
		}
	}
	for _, n := range cfg.schedule {
		if err := f.resize(n); err != nil {
			return report{}, err
		}
		if cfg.plain {
			fmt.Fprintf(out, "%6.2fs fleet of %d\n", time.Since(start).Seconds(), n)
		}
		wait(cfg.phase, nil)
	}
	if err := <-produced; err != nil {
		return report{}, err
	}
	// The last fleet finishes the outbox.
	wait(time.Minute, func() bool { return f.sent() >= int64(cfg.mails) })
	wait(2*cfg.interval, nil) // anything sent twice arrives now
	took := time.Since(start)
	if err := f.resize(0); err != nil {
		return report{}, err
	}
	rep := report{Mails: cfg.mails, StandDown: f.standDown, Rebalances: f.rebalances, Replicas: f.replicas, Took: took}
	if e.sink != nil {
		rep.FromSink = true
		got := e.sink.counts()
		for i := range cfg.mails {
			switch n := got[messageID(strconv.Itoa(i))]; {
			case n == 0:
				rep.Missing++
				key := strconv.Itoa(i)
				c := e.newClient()
				claimed := c.HGet(context.Background(), partition.KeyPrefix(cfg.group)+"claims", key).Val()
				sent := c.HGet(context.Background(), partition.KeyPrefix(cfg.group)+"sent", key).Val()
				pos := ""
				for _, x := range c.XRange(context.Background(), cfg.stream, "-", "+").Val() {
					if fmt.Sprint(x.Values["id"]) == key {
						pos = x.ID
					}
				}
				_ = c.Close()
				rep.Lost = append(rep.Lost, fmt.Sprintf("mail %s at %s: claimed by token %q, recorded sent by %q", key, pos, claimed, sent))
			case n > 1:
				rep.Duplicates += n - 1
			}
			if got[messageID(strconv.Itoa(i))] > 0 {
				rep.Received++
			}
		}
	} else {
		rep.Received = int(f.sent())
		rep.Missing = max(cfg.mails-rep.Received, 0)
		rep.Duplicates = max(rep.Received-cfg.mails, 0)
	}
	rep.print(out)
	return rep, nil
}

// freshNames gives a demo on a Redis of the user's a stream and a group of
// its own, named after the run, so that nothing already there (what
// -role producer wrote, an earlier demo's claims) is counted; a stream
// named with -stream must be empty. On the embedded Redis the names are
// kept.
func freshNames(ctx context.Context, e *env, cfg config, out io.Writer) (config, error) {
	if cfg.redisURL == "" {
		return cfg, nil
	}
	run := strconv.FormatInt(time.Now().UnixMilli(), 36)
	if !cfg.streamSet {
		cfg.stream += "-" + run
	}
	if !cfg.groupSet {
		cfg.group += "-" + run
	}
	c := e.newClient()
	defer c.Close()
	n, err := c.XLen(ctx, cfg.stream).Result()
	if err != nil {
		return cfg, fmt.Errorf("-redis %s: %w", cfg.redisURL, err)
	}
	if n > 0 {
		return cfg, fmt.Errorf("stream %s already holds %d entries (a -role producer's, or an earlier run's): the demo counts what it writes itself; leave out -stream for a fresh one, or delete it (redis-cli DEL %s)", cfg.stream, n, cfg.stream)
	}
	fmt.Fprintf(out, "mail-sender: on %s, stream %s, group %s (this run's own)\n", cfg.redisURL, cfg.stream, cfg.group)
	return cfg, nil
}

// sinkProcess runs the SMTP sink on -smtp (default 127.0.0.1:1025) until
// SIGTERM, printing how many mails it has received, and how many of them
// twice, whenever that changes: the by-hand fleet's SMTP server.
func sinkProcess(ctx context.Context, cfg config, out io.Writer) error {
	addr := cfg.smtpAddr
	if addr == "" {
		addr = "127.0.0.1:1025"
	}
	s, err := startSinkOn(addr)
	if err != nil {
		return err
	}
	defer s.close()
	fmt.Fprintf(out, "SMTP sink on %s: run workers with -smtp %s\n", s.addr(), s.addr())
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(out, "stopped: "+s.summary())
			return nil
		case <-t.C:
			if l := s.summary(); l != last {
				fmt.Fprintf(out, "%s %s\n", time.Now().Format("15:04:05"), l)
				last = l
			}
		}
	}
}

// workerProcess runs one worker until SIGTERM, printing its state changes.
func workerProcess(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.redisURL == "" {
		return fmt.Errorf("-role worker needs -redis: the workers of a group share one Redis")
	}
	if cfg.smtpAddr == "" {
		return fmt.Errorf("-role worker needs -smtp: where to send the mails")
	}
	e, err := setup(cfg)
	if err != nil {
		return err
	}
	defer e.close()
	w, err := startWorker(1, e, cfg)
	if err != nil {
		return err
	}
	if cfg.http != "" {
		addr, stopHTTP, err := serveOps(cfg.http, w)
		if err != nil {
			_ = w.stop()
			return err
		}
		defer stopHTTP()
		fmt.Fprintf(out, "serving http://%s/metrics, /ready and /holding\n", addr)
	}
	last := ""
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(out, "stopping: draining, writing checkpoints")
			err := w.stop()
			fmt.Fprintf(out, "stopped after sending %d mails\n", w.sent.Load())
			return err
		case err := <-w.done:
			return err
		case <-t.C:
			if st := w.state(); st != last {
				fmt.Fprintf(out, "%s %s (%d sent)\n", time.Now().Format("15:04:05.000"), st, w.sent.Load())
				last = st
			}
		}
	}
}

// producerProcess fills the outbox and exits.
func producerProcess(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.redisURL == "" {
		return fmt.Errorf("-role producer needs -redis: the outbox must outlive this process")
	}
	opts, err := redis.ParseURL(cfg.redisURL)
	if err != nil {
		return fmt.Errorf("-redis %q: %w", cfg.redisURL, err)
	}
	c := redis.NewClient(opts)
	defer c.Close()
	// Number the mails after the stream's last one, so that a second run
	// writes new mails rather than ids the sink already has (which it
	// would take as sent twice and count once).
	first := 0
	last, err := c.XRevRangeN(ctx, cfg.stream, "+", "-", 1).Result()
	if err != nil {
		return fmt.Errorf("reading stream %s: %w", cfg.stream, err)
	}
	if len(last) > 0 {
		if n, err := strconv.Atoi(fmt.Sprint(last[0].Values["id"])); err == nil {
			first = n + 1
		}
	}
	if err := produce(ctx, c, cfg.stream, first, cfg.mails, cfg.rate); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %d mails to stream %s (ids %d to %d)\n", cfg.mails, cfg.stream, first, first+cfg.mails-1)
	return nil
}

// serveOps serves the worker's metrics and health probes on addr: what a
// production worker exposes to Prometheus and to its orchestrator.
func serveOps(addr string, w *worker) (string, func(), error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := metrics.Register(reg, w.c, metrics.Options{}); err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/ready", health.ConsumerHandler(w.c, health.Registering))
	mux.Handle("/holding", health.ConsumerHandler(w.c, health.Holding))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("-http %q: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// mostHeld is the replicas most of the workers holding a lease hold (the
// larger on a tie), 0 when none holds one.
func mostHeld(ws []*worker) int {
	n := map[int]int{}
	for _, w := range ws {
		if a, ok := w.lease.Current(); ok {
			n[a.Replicas]++
		}
	}
	best := 0
	for r, c := range n {
		if c > n[best] || c == n[best] && r > best {
			best = r
		}
	}
	return best
}
