package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/health"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/nandi-go/nandi/transport/natsjs"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"
)

const (
	envWorker   = "NANDI_CHAOS_WORKER" // the worker's id; set: run as a worker
	envRedis    = "NANDI_CHAOS_REDIS"  // the group's Redis, through this worker's proxy
	envSink     = "NANDI_CHAOS_SINK"   // the fencing sink's Redis
	envGroup    = "NANDI_CHAOS_GROUP"
	envInterval = "NANDI_CHAOS_INTERVAL"
	envRecord   = "NANDI_CHAOS_RECORD"       // file the worker appends its records to
	envWork     = "NANDI_CHAOS_WORK"         // how long each task takes
	envWait     = "NANDI_CHAOS_WAIT"         // partition.Options.WaitReplicas
	envRate     = "NANDI_CHAOS_RATE"         // the worker's clock runs at this rate (1: the host's)
	envCluster  = "NANDI_CHAOS_CLUSTER"      // set: NANDI_CHAOS_REDIS is a comma-separated list of cluster nodes
	envSentinel = "NANDI_CHAOS_SENTINEL"     // set: the master's name, and NANDI_CHAOS_REDIS the Sentinels
	envServe    = "NANDI_CHAOS_SERVE_TO_CAP" // set: consumer.Options.ServeToCap
	envStand    = "NANDI_CHAOS_STAND_DOWN"   // set: a term ends at once when its mapping changes (the rule before it was kept to its cap)
	envSource   = "NANDI_CHAOS_SOURCE"       // the tasks' log: "" (the Redis stream), "jetstream" or "kafka"
	envSrcAddr  = "NANDI_CHAOS_SOURCE_ADDR"  // the JetStream server (through this worker's proxy) or the Kafka broker (kfake)
)

// The tasks' log on the other transports: a JetStream stream and a Kafka
// topic (on kfake, a Kafka protocol peer, not a broker).
const (
	jsStream   = "CHAOS"
	jsSubject  = "chaos.tasks"
	kafkaTopic = "chaos-tasks"
)

// taskSource is the worker's source of tasks (envSource), and what
// closes it.
func taskSource(client redis.UniversalClient, group string) (transport.Source, func(), error) {
	addr := os.Getenv(envSrcAddr)
	switch os.Getenv(envSource) {
	case "jetstream":
		nc, err := nats.Connect(addr, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
		if err != nil {
			return nil, nil, err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		src, err := natsjs.New(js, jsStream, natsjs.Options{})
		return src, nc.Close, err
	case "kafka":
		src, err := kafkatopic.New([]string{addr}, kafkaTopic, kafkatopic.Options{})
		if err != nil {
			return nil, nil, err
		}
		return src, func() { _ = src.Close() }, nil
	}
	src, err := redisstream.New(client, taskStream(group), redisstream.Options{})
	return src, func() {}, err
}

// mono is the host's monotonic clock in nanoseconds: comparable across the
// processes of one machine.
func mono() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// monoOf maps a local time (with its monotonic reading) to mono.
func monoOf(t time.Time) int64 { return mono() - int64(time.Since(t)) }

// record is one line of a worker's record file.
type record struct {
	Kind     string `json:"k"` // acq, renew, end, start, done
	Worker   int    `json:"w"`
	Index    int    `json:"i,omitempty"`
	Replicas int    `json:"r,omitempty"`
	Token    int64  `json:"tok,omitempty"`
	At       int64  `json:"t"`           // when (mono)
	Deadline int64  `json:"d,omitempty"` // acq, renew: the holding's deadline (mono)
	Held     bool   `json:"h,omitempty"` // start: the lease held at that moment
	ID       int    `json:"id,omitempty"`
	Seq      int    `json:"seq,omitempty"`
	Accepted bool   `json:"ok,omitempty"`  // done: the sink accepted the effect
	Prov     bool   `json:"p,omitempty"`   // acq: the term is provisional (the fenced handoff)
	Shard    int    `json:"s,omitempty"`   // start: the task's shard
	Pos      string `json:"pos,omitempty"` // start: and its position there
}

type recorder struct {
	mu sync.Mutex
	f  *os.File
	w  int
}

// write appends one line with one write call: a kill -9 loses nothing
// written before it.
func (r *recorder) write(rec record) {
	rec.Worker = r.w
	b, _ := json.Marshal(rec)
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = r.f.Write(append(b, '\n'))
}

// fence is the sink's write: refused when a holder with a newer token has
// written the task already, as a database fenced by token would.
var fence = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) < cur then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('RPUSH', KEYS[2], ARGV[3])
return 1`)

func workerMain() int {
	id, _ := strconv.Atoi(os.Getenv(envWorker))
	standDown := os.Getenv(envStand) != ""
	interval, _ := time.ParseDuration(os.Getenv(envInterval))
	work, _ := time.ParseDuration(os.Getenv(envWork))
	f, err := os.OpenFile(os.Getenv(envRecord), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rec := &recorder{f: f, w: id}
	var client redis.UniversalClient = redis.NewClient(&redis.Options{Addr: os.Getenv(envRedis)})
	if os.Getenv(envCluster) != "" {
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(os.Getenv(envRedis), ",")})
	}
	if name := os.Getenv(envSentinel); name != "" {
		client = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: name, SentinelAddrs: strings.Split(os.Getenv(envRedis), ",")})
	}
	sink := redis.NewClient(&redis.Options{Addr: os.Getenv(envSink)})
	wait, _ := strconv.Atoi(os.Getenv(envWait))
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil)) // worker-N.log: state changes and trouble
	opts := partition.Options{Name: os.Getenv(envGroup), Interval: interval, WaitReplicas: wait, Logger: logger, StandDownAtChange: standDown}
	if rate, err := strconv.ParseFloat(os.Getenv(envRate), 64); err == nil && rate != 1 {
		opts.Clock = driftClock{t0: time.Now(), rate: rate}
	}
	lease, err := partition.New(client, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	src, closeSrc, err := taskSource(client, os.Getenv(envGroup))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer closeSrc()
	h := func(ctx context.Context, m *transport.Message) error {
		a, ok := lease.Current()
		x, _ := strconv.Atoi(m.Key)
		seq, _ := strconv.Atoi(string(m.Payload))
		rec.write(record{Kind: "start", At: mono(), ID: x, Seq: seq, Held: ok, Index: a.Index, Replicas: a.Replicas, Token: a.Token, Shard: m.Shard, Pos: m.Position.String()})
		select {
		case <-time.After(work):
		case <-ctx.Done():
			return ctx.Err()
		}
		// The effect is fenced by the token the handler reads from its own
		// context: the term it runs under, with no race against the lease.
		term, _ := consumer.AssignmentFromContext(ctx)
		effect := fmt.Sprintf("%d/%d/%d/%d", x, seq, id, term.Token)
		n, err := fence.Run(context.WithoutCancel(ctx), sink, []string{"fence", "effects"}, m.Key, term.Token, effect).Int()
		if err != nil {
			return err
		}
		rec.write(record{Kind: "done", At: mono(), ID: x, Seq: seq, Token: term.Token, Accepted: n == 1})
		return nil
	}
	c, err := consumer.New(lease, src, h, consumer.Options{Concurrency: 4, CheckpointInterval: 100 * time.Millisecond, ServeToCap: os.Getenv(envServe) != "", Logger: logger})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	// The terms are recorded until Run has returned, not only until
	// SIGTERM: with ServeToCap the worker serves its term to its cap after
	// it.
	recCtx, stopRec := context.WithCancel(context.Background())
	recorded := make(chan struct{})
	go func() { recordTerms(recCtx, lease, rec); close(recorded) }()
	go recordReady(ctx, c, rec)
	err = c.Run(ctx)
	stopRec()
	<-recorded
	if err != nil && !strings.Contains(err.Error(), "context canceled") {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// taskStream is the group's stream of tasks: its own per group, so that
// groups that share a server (the subtests of one cluster) do not share
// tasks, and not in the group's slot, so that moving that slot does not
// move the tasks.
func taskStream(group string) string { return group + ":tasks" }

// driftClock runs at rate times the host's clock: a worker whose clock is
// fast (rate > 1) or slow (rate < 1).
type driftClock struct {
	t0   time.Time
	rate float64
}

func (c driftClock) Now() time.Time {
	return c.t0.Add(time.Duration(float64(time.Since(c.t0)) * c.rate))
}

func (c driftClock) Host(t time.Time) time.Time {
	return c.t0.Add(time.Duration(float64(t.Sub(c.t0)) / c.rate))
}

// recordReady records the moment the worker turns ready the way
// health.ConsumerHandler in Registering mode says (the store answered a
// registration): what a Kubernetes readiness probe would see.
func recordReady(ctx context.Context, c *consumer.Consumer, rec *recorder) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		if ok, _ := health.CheckConsumer(c, health.Registering); ok {
			rec.write(record{Kind: "ready", At: mono()})
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// recordTerms records every term: its start and deadline, every change of
// its deadline (looked at every millisecond), and its end.
func recordTerms(ctx context.Context, l *partition.Lease, rec *recorder) {
	for {
		t, err := l.Next(ctx)
		if err != nil {
			return
		}
		a, d := t.Assignment(), t.Deadline()
		rec.write(record{Kind: "acq", Index: a.Index, Replicas: a.Replicas, Token: a.Token, At: monoOf(t.Start()), Deadline: monoOf(d), Prov: t.Provisional()})
		tick := time.NewTicker(time.Millisecond)
		for open := true; open; {
			select {
			case <-t.Done():
				end := time.Now()
				if fd := t.Deadline(); fd.Before(end) {
					end = fd
				}
				rec.write(record{Kind: "end", Token: a.Token, At: monoOf(end)})
				open = false
			case <-tick.C:
				if nd := t.Deadline(); !nd.Equal(d) {
					d = nd
					rec.write(record{Kind: "renew", Token: a.Token, At: mono(), Deadline: monoOf(d)})
				}
			case <-ctx.Done():
				tick.Stop()
				select {
				case <-t.Done(): // ended as Run returned: its end is recorded too
					end := time.Now()
					if fd := t.Deadline(); fd.Before(end) {
						end = fd
					}
					rec.write(record{Kind: "end", Token: a.Token, At: monoOf(end)})
				default:
				}
				return
			}
		}
		tick.Stop()
	}
}
