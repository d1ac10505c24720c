package consumer_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/presence"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
	"github.com/redis/go-redis/v9"
)

// presenceWrites counts the round trips that write a presence record.
type presenceWrites struct{ n atomic.Int64 }

func (h *presenceWrites) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *presenceWrites) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.Contains(cmd.String(), ":presence") {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *presenceWrites) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if strings.Contains(c.String(), ":presence") {
				h.n.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// A group of two on a real redis-server: each worker's record names it
// and what it holds, with its figures; it costs one round trip per worker
// per interval; a clean stop removes it at once, and a record no longer
// written expires within its TTL.
func TestPresence(t *testing.T) {
	srv := redistest.Start(t)
	const iv = 200 * time.Millisecond
	log := memory.NewLog(2)
	for i := range 50 {
		log.Append(string(rune('0'+i%10)), nil)
	}
	hooks := make([]*presenceWrites, 2)
	cs := make([]*consumer.Consumer, 2)
	stops := make([]func(), 2)
	for i := range 2 {
		hooks[i] = &presenceWrites{}
		client := srv.Client()
		client.AddHook(hooks[i])
		l, err := partition.New(client, partition.Options{Name: "mail", Interval: iv})
		if err != nil {
			t.Fatal(err)
		}
		c, err := consumer.New(l, log.Source(), func(ctx context.Context, m *transport.Message) error {
			if m.Key == "7" {
				return errors.New("smtp: 451 try again later")
			}
			return nil
		}, consumer.Options{WorkerID: []string{"worker-a", "<img src=x onerror=alert(1)>"}[i], RetryMin: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		stops[i] = func() { cancel(); <-done }
	}
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	reader := srv.Client()
	var rs []presence.Record
	redistest.WaitFor(t, 10*time.Second, "two records holding distinct indexes of 2", func() bool {
		var err error
		rs, err = presence.Read(context.Background(), reader, "mail")
		return err == nil && len(rs) == 2 && rs[0].Held && rs[1].Held && rs[0].Index == 0 && rs[1].Index == 1 &&
			rs[0].Replicas == 2 && rs[1].Replicas == 2 && rs[0].Handled+rs[1].Handled > 0
	})
	byWorker := map[string]presence.Record{}
	for _, r := range rs {
		byWorker[r.Worker] = r
		if r.Host == "" || r.PID == 0 || r.Version == "" || r.Token == 0 || r.Since.IsZero() || r.Interval != iv || len(r.Oldest) != 2 {
			t.Errorf("record %+v lacks what a record must carry", r)
		}
		if len(r.LagMessages) != 2 {
			t.Errorf("record of %s: lag %v; want one per shard", r.Worker, r.LagMessages)
		}
	}
	for _, c := range cs {
		if _, ok := byWorker[c.Worker()]; !ok {
			t.Errorf("no record of %q in %+v", c.Worker(), rs)
		}
	}
	// Task 7 keeps failing on whichever worker owns it.
	redistest.WaitFor(t, 5*time.Second, "the failing task's error in its owner's record", func() bool {
		rs, _ = presence.Read(context.Background(), reader, "mail")
		for _, r := range rs {
			if strings.Contains(r.LastError, "451 try again later") && r.Failed > 0 {
				return true
			}
		}
		return false
	})

	// One round trip per worker per interval, at most (and at least one
	// every interval or so: the records stay fresh).
	for i := range hooks {
		hooks[i].n.Store(0)
	}
	time.Sleep(10 * iv)
	for i, h := range hooks {
		if n := h.n.Load(); n > 11 || n < 8 {
			t.Errorf("worker %d made %d presence round trips in 10 intervals; want about 10, at most 11", i, n)
		}
	}

	// A clean stop removes the record at once.
	stops[1]()
	stops[1] = func() {}
	rs, err := presence.Read(context.Background(), reader, "mail")
	if err != nil || len(rs) != 1 || rs[0].Worker != "worker-a" {
		t.Errorf("after worker 2 stopped: %+v, %v; want worker-a's record only", rs, err)
	}

	// A record no longer written (a crashed worker) is gone within its TTL.
	if err := presence.Write(context.Background(), reader, "mail", &presence.Record{Worker: "crashed"}, 3*iv); err != nil {
		t.Fatal(err)
	}
	if rs, _ := presence.Read(context.Background(), reader, "mail"); len(rs) != 2 {
		t.Fatalf("after writing a record: %d records; want 2", len(rs))
	}
	time.Sleep(3*iv + 50*time.Millisecond)
	if rs, _ := presence.Read(context.Background(), reader, "mail"); len(rs) != 1 {
		t.Errorf("3 intervals after its last write, the crashed worker's record is still read: %+v", rs)
	}
	if n, _ := reader.Exists(context.Background(), presence.RecordKey("mail", "crashed")).Result(); n != 0 {
		t.Errorf("the crashed worker's record key outlived its TTL")
	}
}

// NoPresence writes nothing.
func TestNoPresence(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := partition.New(srv.Client(), partition.Options{Name: "quiet", Interval: 100 * time.Millisecond})
	c, err := consumer.New(l, memory.NewLog(1).Source(), func(context.Context, *transport.Message) error { return nil },
		consumer.Options{NoPresence: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	if _, err := l.Next(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	cancel()
	<-done
	keys, _ := srv.Client().Keys(context.Background(), "*presence*").Result()
	if len(keys) != 0 {
		t.Errorf("NoPresence wrote %v", keys)
	}
}

// infoCounter counts a source's Info calls: the I/O a lag costs.
type infoCounter struct {
	transport.Source
	n atomic.Int64
}

func (s *infoCounter) Info(ctx context.Context) (transport.Info, error) {
	s.n.Add(1)
	return s.Source.Info(ctx)
}

// With NoPresence the lag is computed only once something asks for it
// (WantLag: package metrics at its registration): until then no interval
// costs a description of the source, however often LastLag reads (it
// changes nothing); from then on each does, and the lag is served.
func TestLagIsComputedOnlyWhenWanted(t *testing.T) {
	srv := redistest.Start(t)
	const iv = 100 * time.Millisecond
	l, _ := partition.New(srv.Client(), partition.Options{Name: "lagwanted", Interval: iv})
	src := &infoCounter{Source: memory.NewLog(1).Source()}
	c, err := consumer.New(l, src, func(context.Context, *transport.Message) error { return nil },
		consumer.Options{NoPresence: true, DescribeInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if _, err := l.Next(ctx); err != nil {
		t.Fatal(err)
	}
	// A window of 10 intervals in one term (a new term describes the
	// source: on a busy machine a lease may lapse; such a window is tried
	// again).
	for try := 0; ; try++ {
		time.Sleep(3 * iv)
		if _, at, _ := c.LastLag(); !at.IsZero() {
			t.Fatal("a lag computed with NoPresence before WantLag")
		}
		before, terms := src.n.Load(), c.Stats().Terms
		time.Sleep(10 * iv)
		n := src.n.Load() - before
		if c.Stats().Terms != terms && try < 5 {
			continue
		}
		if n != 0 {
			t.Errorf("%d Info calls in 10 intervals with NoPresence and nobody asking for the lag; want 0", n)
		}
		break
	}
	c.WantLag() // as metrics.Register does
	redistest.WaitFor(t, 10*time.Second, "the lag computed", func() bool {
		_, at, err := c.LastLag()
		return !at.IsZero() && err == nil
	})
}

// A handover lasts less than an interval, so a worker writes its presence
// record as soon as its term is handed over, not at its next interval: a
// group of two at a 1s interval, a third joins, and each old worker's
// record says it is handing over (until its term's deadline) within a
// fifth of an interval of its lease saying so. (At the next interval's
// write, each would miss that bound four times in five.)
func TestPresenceSaysAHandoverAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	const iv = time.Second
	log := memory.NewLog(2)
	var leases []*partition.Lease
	var stops []func()
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	start := func(worker string) {
		l, err := partition.New(srv.Client(), partition.Options{Name: "handover", Interval: iv})
		if err != nil {
			t.Fatal(err)
		}
		c, err := consumer.New(l, log.Source(), func(context.Context, *transport.Message) error { return nil }, consumer.Options{WorkerID: worker})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		leases, stops = append(leases, l), append(stops, func() { cancel(); <-done })
	}
	start("a")
	start("b")
	redistest.WaitFor(t, 10*time.Second, "a group of two", func() bool {
		a, okA := leases[0].Current()
		b, okB := leases[1].Current()
		return okA && okB && a.Replicas == 2 && b.Replicas == 2
	})
	start("c")
	reader := srv.Client()
	leaseSaid, recordSaid := map[string]time.Time{}, map[string]time.Time{}
	redistest.WaitFor(t, 4*iv, "both old workers' records saying they hand over", func() bool {
		now := time.Now()
		for i, w := range []string{"a", "b"} {
			if tm := leases[i].Term(); tm != nil && tm.HandingOver() && leaseSaid[w].IsZero() {
				leaseSaid[w] = now
			}
		}
		rs, _ := presence.Read(context.Background(), reader, "handover")
		// The lease may have begun handing over between its look above and
		// the read: look again (seen under load). A term already over by
		// now handed over in that time too.
		for i, w := range []string{"a", "b"} {
			if tm := leases[i].Term(); (tm == nil || tm.HandingOver()) && leaseSaid[w].IsZero() {
				for _, r := range rs {
					if r.Worker == w && r.HandingOver {
						leaseSaid[w] = now
					}
				}
			}
		}
		for _, r := range rs {
			if r.HandingOver && (r.Worker == "a" || r.Worker == "b") && recordSaid[r.Worker].IsZero() {
				if !r.Until.After(r.At) {
					t.Errorf("record of %s hands over until %v, written at %v; want a deadline after it", r.Worker, r.Until, r.At)
				}
				recordSaid[r.Worker] = now
			}
		}
		time.Sleep(2 * time.Millisecond)
		return !recordSaid["a"].IsZero() && !recordSaid["b"].IsZero()
	})
	for _, w := range []string{"a", "b"} {
		if leaseSaid[w].IsZero() {
			t.Errorf("worker %s's record said it hands over before its lease did", w)
			continue
		}
		if d := recordSaid[w].Sub(leaseSaid[w]); d > iv/5 {
			t.Errorf("worker %s's record said it hands over %v after its lease did; want within %v", w, d, iv/5)
		}
	}
}
