package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/redis/go-redis/v9"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
)

// handling is one handler call, as the handler saw it.
type handling struct {
	worker     int
	id, seq    int
	start, end time.Time
	held       partition.Assignment
	owned      bool
	shard      int
	pos        transport.Position
	ctxAt      time.Time // the deadline of the handler's context
}

// fleet is a group of consumers over one source, each with its own lease
// and client, as separate processes would have.
type fleet struct {
	t      *testing.T
	srv    *redistest.Server
	client func() redis.UniversalClient // the leases' (default: srv's)
	ids    int                          // exactlyOnce's ids (default 10,000)
	opts   partition.Options
	src    func() transport.Source
	copt   consumer.Options
	work   func() // the handler's work, if any
	// reordered, when set, counts an id's tasks handled out of order
	// instead of failing (a log whose shard count changed: an id's tasks
	// before and after the change are in different shards); check still
	// fails on two at once.
	reordered *int
	// serveToCap, when set, says which workers leave serving their share
	// to its cap (consumer.Options.ServeToCap).
	serveToCap func(id int) bool
	// fenced counts the terms the stopped workers served from a
	// provisional lease (Stats.FencedHandoffs).
	fenced atomic.Int64
	// announcedTwice counts the tasks check found handled twice that a
	// worker had announced (a handler that overran its lease, a holder
	// that did not release): allowed, never silent.
	announcedTwice int
	// said is what the workers announced may run twice: a task handled
	// twice must be in it (check).
	said *announcements
	mu   sync.Mutex
	rec  []handling
	next int
	live map[int]*member
}

type member struct {
	c      *consumer.Consumer
	cancel context.CancelFunc
	done   chan error
}

func (f *fleet) start() int {
	f.next++
	id := f.next
	var lc redis.UniversalClient
	if f.client != nil {
		lc = f.client()
	} else {
		lc = f.srv.Client()
	}
	l, err := partition.New(lc, f.opts)
	if err != nil {
		f.t.Fatal(err)
	}
	h := func(ctx context.Context, m *transport.Message) error {
		// The term the call runs under, live while its context is (not the
		// lease's Current: during a fenced handoff that is the next
		// mapping's provisional term, not yet held, while this one serves
		// until it releases).
		a, ok := consumer.AssignmentFromContext(ctx)
		ok = ok && ctx.Err() == nil
		x, _ := strconv.Atoi(m.Key)
		seq, _ := strconv.Atoi(strings.TrimPrefix(string(m.Payload), m.Key+"/"))
		r := handling{worker: id, id: x, seq: seq, start: time.Now(), held: a, owned: ok && a.Owns(uint64(x)), shard: m.Shard, pos: m.Position}
		r.ctxAt, _ = ctx.Deadline()
		if f.work != nil {
			f.work()
		}
		r.end = time.Now()
		f.mu.Lock()
		f.rec = append(f.rec, r)
		f.mu.Unlock()
		return nil
	}
	copt := f.copt
	if copt.Logger == nil {
		f.mu.Lock()
		if f.said == nil {
			f.said = newAnnouncements()
		}
		copt.Logger = slog.New(f.said.handler())
		f.mu.Unlock()
	}
	if f.serveToCap != nil && f.serveToCap(id) {
		copt.ServeToCap = true
		copt.ShutdownTimeout = 4 * f.opts.Interval
	}
	c, err := consumer.New(l, f.src(), h, copt)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- c.Run(ctx) }()
	f.live[id] = m
	return id
}

// stop is a clean stop: SIGTERM in a real process.
func (f *fleet) stop(id int) {
	m := f.live[id]
	m.cancel()
	if err := <-m.done; err != nil {
		f.t.Errorf("worker %d: Run = %v", id, err)
	}
	f.fenced.Add(m.c.Stats().FencedHandoffs)
	f.t.Logf("worker %d stopped: %+v", id, m.c.Stats())
	delete(f.live, id)
}

// produce publishes ids*each messages from a goroutine, each id's in
// sequence ("id/seq"), pausing every 100 for pause, and closes the
// channel it returns when all are published.
func produce(ids, each int, pause time.Duration, publish publisher) <-chan struct{} {
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for s := range each {
			for x := range ids {
				publish(strconv.Itoa(x), fmt.Appendf(nil, "%d/%d", x, s))
				if x%100 == 0 {
					time.Sleep(pause)
				}
			}
		}
	}()
	return produced
}

// finish waits for every message to be handled (30 seconds at most),
// half a second more for anything handled twice to show, stops the
// fleet and checks it.
func (f *fleet) finish(ids, each int) {
	deadline := time.Now().Add(30 * time.Second)
	for f.handled() < ids*each && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	f.stopAll()
	f.check(ids, each)
}

func (f *fleet) stopAll() {
	for id := range f.live {
		f.stop(id)
	}
}

func (f *fleet) handled() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.rec)
}

// check verifies every message was handled exactly once, in order per id,
// never by two workers at once, and only by a worker that owned it.
func (f *fleet) check(ids, each int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := make(map[[2]int]handling, ids*each)
	var dups []handling // the first handlings of tasks handled twice
	last := map[int]handling{}
	bad := 0
	report := func(format string, args ...any) {
		if bad++; bad <= 10 {
			f.t.Errorf(format, args...)
		}
	}
	for _, r := range f.rec {
		if !r.owned {
			report("worker %d handled id %d/%d holding %+v: not its task at that moment", r.worker, r.id, r.seq, r.held)
		}
		k := [2]int{r.id, r.seq}
		if p, dup := seen[k]; dup && len(dups) < 3 {
			dups = append(dups, p)
		}
		if p, dup := seen[k]; dup {
			what := fmt.Sprintf("id %d seq %d (shard %d position %v) handled twice: by worker %d (%+v, ended %s, %s before its context's deadline) and by worker %d (%+v, started %s)",
				r.id, r.seq, r.shard, r.pos, p.worker, p.held, p.end.Format("15:04:05.000"), p.ctxAt.Sub(p.end), r.worker, r.held, r.start.Format("15:04:05.000"))
			if f.said != nil && f.said.said(r.shard, r.pos) {
				f.announcedTwice++
				f.t.Logf("%s; announced", what)
			} else {
				report("%s; announced by no worker", what)
			}
		}
		seen[k] = r
		if p, ok := last[r.id]; ok {
			switch {
			case r.seq < p.seq && f.reordered != nil:
				*f.reordered++
			case r.seq < p.seq:
				report("id %d: seq %d handled after seq %d (workers %d, %d)", r.id, r.seq, p.seq, p.worker, r.worker)
			}
			if r.start.Before(p.end) {
				report("id %d: seq %d (worker %d) started before seq %d (worker %d) ended", r.id, r.seq, r.worker, p.seq, p.worker)
			}
		}
		last[r.id] = r
	}
	missing := 0
	for x := range ids {
		for s := range each {
			if _, ok := seen[[2]int{x, s}]; !ok {
				if missing++; missing <= 5 {
					f.t.Errorf("id %d seq %d never handled", x, s)
				}
			}
		}
	}
	if missing > 0 || bad > 0 {
		f.t.Errorf("%d of %d messages missing, %d violations", missing, ids*each, bad)
	}
	if f.announcedTwice > 0 {
		f.t.Logf("figures: %d of %d messages handled twice, each announced by the worker that overran its lease or the one that took over from a holder that did not release", f.announcedTwice, ids*each)
	}
	if len(dups) > 0 && f.srv != nil {
		// What the ledger says of the first handlers' marks.
		st, err := checkpoint.NewRedis(f.srv.Client(), f.opts.Name).Read(context.Background())
		if err != nil || st.Current == nil {
			f.t.Logf("reading the ledger: %v", err)
			return
		}
		for _, d := range dups {
			for _, e := range st.History {
				if e.R == d.held.Replicas {
					m := e.Mark(d.shard, d.held.Index)
					f.t.Logf("epoch %d (R %d, token %d): index %d's mark of shard %d: Low %v High %v, %d undone; position %v done by it: %v",
						e.N, e.R, e.Token, d.held.Index, d.shard, m.Low, m.High, len(m.Undone), d.pos, m.Done(d.pos))
				}
			}
		}
	}
}

// exactlyOnce is the scenario of issue 3: 60,000 messages (10,000 ids,
// each six times in sequence) published while the group goes 3 -> 5 -> 2
// workers by clean starts and stops; then every message must have been
// handled exactly once, in order per id, only by its owner at that moment.
func exactlyOnce(t *testing.T, f *fleet, publish func(key string, payload []byte)) {
	ids, each := 10_000, 6
	if f.ids > 0 {
		ids = f.ids
	}
	f.live = map[int]*member{}
	conc := f.copt.Concurrency
	if conc == 0 {
		conc = 8
	}
	f.copt = consumer.Options{Concurrency: conc, CheckpointInterval: 50 * time.Millisecond}
	// Work long enough that the holders fall behind the producer by
	// different amounts: a handover then has to skip what the faster ones
	// finished.
	f.work = func() { time.Sleep(time.Duration(rand.Int64N(int64(3 * time.Millisecond)))) }
	if conc == 1 {
		// One at a time: a task in 20 takes a millisecond, so that the
		// holders still fall behind by different amounts.
		f.work = func() {
			if rand.IntN(20) == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}
	for range 3 {
		f.start()
	}
	produced := produce(ids, each, 10*time.Millisecond, publish) // about 6 seconds in all
	time.Sleep(2 * time.Second)
	a := f.start()
	f.start()
	time.Sleep(2 * time.Second)
	stopped := 0
	for id := range f.live {
		if id != a && stopped < 3 {
			f.stop(id)
			stopped++
		}
	}
	<-produced
	f.finish(ids, each)
}

func TestConsumerExactlyOnceThroughCleanRebalances(t *testing.T) {
	log := memory.NewLog(4)
	f := &fleet{t: t, srv: redistest.Start(t), opts: partition.Options{Name: groupName(t), Interval: 200 * time.Millisecond}, src: log.Source}
	exactlyOnce(t, f, func(k string, p []byte) { log.Append(k, p) })
}

// The same with Concurrency 1, where intake runs each task inline.
func TestConsumerExactlyOnceThroughCleanRebalancesInline(t *testing.T) {
	log := memory.NewLog(4)
	f := &fleet{t: t, srv: redistest.Start(t), opts: partition.Options{Name: groupName(t), Interval: 200 * time.Millisecond}, src: log.Source,
		copt: consumer.Options{Concurrency: 1}}
	exactlyOnce(t, f, func(k string, p []byte) { log.Append(k, p) })
}

// The same on a real Redis stream, the group trimming what it has finished.
func TestRedisStreamExactlyOnceThroughCleanRebalances(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	f := &fleet{t: t, srv: srv, opts: partition.Options{Name: groupName(t), Interval: 200 * time.Millisecond}}
	f.src = func() transport.Source {
		src, err := redisstream.New(srv.Client(), "outbox", redisstream.Options{Trim: true})
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	ctx := context.Background()
	exactlyOnce(t, f, func(k string, p []byte) {
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "outbox", Values: []any{"id", k, "payload", p}}).Err(); err != nil {
			t.Error(err)
		}
	})
	if n := c.XLen(ctx, "outbox").Val(); n >= 60_000 {
		t.Errorf("the stream still holds %d entries; the group should have trimmed what it finished", n)
	}
}

// Sharded streams (outbox:{0}..outbox:{7}), each key written to its
// stream: every entry of every stream exactly once, in order per id, only
// by its owner, while the group changes; on a single server.
func TestRedisStreamShardedExactlyOnceThroughCleanRebalances(t *testing.T) {
	srv := redistest.Start(t)
	shardedExactlyOnce(t, &fleet{t: t, srv: srv}, func() redis.UniversalClient { return srv.Client() })
}

// The same on a Redis Cluster of 3 masters: the streams spread over them,
// read with one round trip per node; the leases on the cluster too.
func TestRedisStreamShardedExactlyOnceOnACluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	client := func() redis.UniversalClient { return cl.Client() }
	shardedExactlyOnce(t, &fleet{t: t, srv: cl.Nodes[0], client: client}, client)
}

func shardedExactlyOnce(t *testing.T, f *fleet, client func() redis.UniversalClient) {
	f.opts = partition.Options{Name: groupName(t), Interval: 200 * time.Millisecond}
	f.ids = 4000
	names := redisstream.Names("outbox", 8)
	f.src = func() transport.Source {
		src, err := redisstream.NewSharded(client(), names, redisstream.Options{Trim: true, Block: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	c := client()
	router, _ := redisstream.NewSharded(c, names, redisstream.Options{})
	ctx := context.Background()
	exactlyOnce(t, f, func(k string, p []byte) {
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: router.StreamFor(k), Values: []any{"id", k, "payload", p}}).Err(); err != nil {
			t.Error(err)
		}
	})
}
