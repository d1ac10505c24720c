package delivery

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/natstest"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/natscore"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
)

// speedN is how many entries each speed figure reads, already in the
// stream when the readers start (as issue 13 measured).
const speedN = 200_000

// window is a rate from the first handled message to the last.
type window struct {
	n          int64
	seen       atomic.Int64
	mu         sync.Mutex
	start, end time.Time
	done       chan struct{}
}

func newWindow(n int) *window { return &window{n: int64(n), done: make(chan struct{})} }

func (w *window) add(k int) {
	v := w.seen.Add(int64(k))
	if v == int64(k) {
		w.mu.Lock()
		w.start = time.Now()
		w.mu.Unlock()
	}
	if v >= w.n && v-int64(k) < w.n {
		w.mu.Lock()
		w.end = time.Now()
		w.mu.Unlock()
		close(w.done)
	}
}

func (w *window) wait(b *testing.B, what string) {
	select {
	case <-w.done:
	case <-time.After(120 * time.Second):
		b.Fatalf("%s: %d of %d in 120s", what, w.seen.Load(), w.n)
	}
}

func (w *window) rate() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return float64(w.n-1) / w.end.Sub(w.start).Seconds()
}

// sink keeps the parsed fields alive, as a handler would use them.
var sink atomic.Uint64

// fillStream appends n entries (id, payload) to stream, pipelined.
func fillStream(c redis.UniversalClient, stream string, n int) {
	ctx := context.Background()
	for i := 0; i < n; i += 2000 {
		p := c.Pipeline()
		for j := i; j < min(i+2000, n); j++ {
			p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"id", j, "payload", "Dear customer, your order has shipped."}})
		}
		_, _ = p.Exec(ctx)
	}
}

// redisCPU is the server's CPU seconds (user + system) so far.
func redisCPU(s *redistest.Server) float64 {
	u, _ := strconv.ParseFloat(s.InfoSection("cpu", "used_cpu_user"), 64)
	y, _ := strconv.ParseFloat(s.InfoSection("cpu", "used_cpu_sys"), 64)
	return u + y
}

// entryFields reads what a handler needs of an entry, as the plainest loop
// a user writes does: its id as a number, its payload's length (read
// without copying). nandi's handlers in these figures do the same with
// the Message (its Key and Payload).
func entryFields(m redis.XMessage) {
	id, _ := strconv.ParseUint(m.Values["id"].(string), 10, 64)
	p, _ := m.Values["payload"].(string)
	sink.Add(id + uint64(len(p)))
}

// plainXRead is the plainest loop a user writes: XREAD COUNT 512 from the
// start, reading the fields of each entry.
func plainXRead(c redis.UniversalClient, stream string, n int) float64 {
	return plainestXRead(c, stream, n)
}

// xreadgroup runs k consumers of one XREADGROUP group over the whole
// stream, each reading the fields and acknowledging per batch.
func xreadgroup(b *testing.B, c redis.UniversalClient, stream string, k, n int) float64 {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	group := fmt.Sprintf("g%d", time.Now().UnixNano())
	if err := c.XGroupCreate(ctx, stream, group, "0").Err(); err != nil {
		b.Fatal(err)
	}
	w := newWindow(n)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() {
			for ctx.Err() == nil {
				res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: strconv.Itoa(i), Streams: []string{stream, ">"}, Count: 512, Block: 100 * time.Millisecond}).Result()
				if err != nil {
					continue
				}
				ids := make([]string, 0, len(res[0].Messages))
				for _, m := range res[0].Messages {
					entryFields(m)
					w.add(1)
					ids = append(ids, m.ID)
				}
				c.XAck(ctx, stream, group, ids...)
			}
		})
	}
	w.wait(b, "XREADGROUP")
	cancel()
	wg.Wait()
	return w.rate()
}

// nandiGroup runs k workers of one group (each its own client, lease and
// consumer) over sources made by src, and returns the rate from the first
// handled message to the last. Handlers wait until the whole group holds
// one mapping, so that the window measures a settled group, not its
// forming; each worker's stats say whether it served one term.
func nandiGroup(b *testing.B, client func() redis.UniversalClient, group string, k, conc, n int, src func() transport.Source) (float64, []consumer.Stats) {
	r, st, _ := nandiGroupMeasured(b, client, group, k, conc, n, src, func() float64 { return 0 })
	return r, st
}

// nandiGroupMeasured is nandiGroup that also returns how much measure grew
// from the moment the group holds one mapping to the last message (the
// Redis server's CPU, say: a settled group's cost, not its forming's).
func nandiGroupMeasured(b *testing.B, client func() redis.UniversalClient, group string, k, conc, n int, src func() transport.Source, measure func() float64) (float64, []consumer.Stats, float64) {
	w := newWindow(n)
	var ready atomic.Bool
	var leases []*partition.Lease
	var cs []*consumer.Consumer
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range k {
		l, err := partition.New(client(), partition.Options{Name: group, Interval: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		h := func(ctx context.Context, m *transport.Message) error {
			if !ready.Load() {
				for !ready.Load() {
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(time.Millisecond):
					}
				}
			}
			id, _ := strconv.ParseUint(m.Key, 10, 64)
			sink.Add(id + uint64(len(m.Payload)))
			w.add(1)
			return nil
		}
		c, err := consumer.New(l, src(), h, consumer.Options{Concurrency: conc})
		if err != nil {
			b.Fatal(err)
		}
		leases, cs = append(leases, l), append(cs, c)
		wg.Go(func() { _ = c.Run(ctx) })
	}
	redistest.WaitFor(b, 60*time.Second, "the group to hold one mapping", func() bool {
		for _, l := range leases {
			if a, ok := l.Current(); !ok || a.Replicas != k {
				return false
			}
		}
		return true
	})
	m0 := measure()
	ready.Store(true)
	w.wait(b, group)
	grew := measure() - m0
	cancel()
	wg.Wait()
	var st []consumer.Stats
	for _, c := range cs {
		st = append(st, c.Stats())
	}
	return w.rate(), st, grew
}

// trials is how many times a figure is measured (alternating nandi and its
// baseline); the table shows medians.
const trials = 3

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// BenchmarkSpeedFigures prints issue 13's table: nandi / baseline / ratio
// for each figure, side by side in one run on one redis-server (and an
// embedded NATS server), with the readers' fields parsed alike.
//
//	go test -run '^$' -bench SpeedFigures -benchtime 1x ./integration/delivery/
func BenchmarkSpeedFigures(b *testing.B) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "speed, %s, %d entries each\tnandi\tbaseline\tratio\n", time.Now().UTC().Format("2006-01-02"), speedN)
	row := func(name string, nandi, base float64) {
		fmt.Fprintf(tw, "%s\t%.0f/s\t%.0f/s\t%.2f\n", name, nandi, base, nandi/base)
	}
	srv := redistest.Start(b)
	c := srv.Client()
	client := func() redis.UniversalClient { return srv.Client() }
	stream := func(name string) func() transport.Source {
		return func() transport.Source {
			s, err := redisstream.New(srv.Client(), name, redisstream.Options{})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}
	}

	// One worker owning everything against the plain XREAD loop.
	fillStream(c, "one", speedN)
	var plains []float64
	nandis := map[int][]float64{}
	for i := range trials {
		plains = append(plains, plainXRead(c, "one", speedN))
		for _, conc := range []int{1, 8} {
			r, _ := nandiGroup(b, client, fmt.Sprintf("one-%d-%d", conc, i), 1, conc, speedN, stream("one"))
			nandis[conc] = append(nandis[conc], r)
		}
	}
	for _, conc := range []int{1, 8} {
		row(fmt.Sprintf("Redis Streams, 1 worker (Concurrency %d) vs plain XREAD loop", conc), median(nandis[conc]), median(plains))
	}

	// Groups of 4 and 16 against XREADGROUP+XACK with as many consumers,
	// with Redis's CPU per message. Every nandi worker reads the whole
	// stream; on one machine they also share its 2 cores.
	var cpuRows []string
	for _, k := range []int{4, 16} {
		name := fmt.Sprintf("group-%d", k)
		fillStream(c, name, speedN)
		cpu0 := redisCPU(srv)
		base := xreadgroup(b, c, name, k, speedN)
		baseCPU := (redisCPU(srv) - cpu0) / speedN
		cpu0 = redisCPU(srv)
		r, st := nandiGroup(b, client, name, k, 1, speedN, stream(name))
		nandiCPU := (redisCPU(srv) - cpu0) / speedN
		row(fmt.Sprintf("Redis Streams, group of %d vs XREADGROUP+XACK x%d", k, k), r, base)
		terms := 0
		for _, s := range st {
			terms += int(s.Terms)
		}
		cpuRows = append(cpuRows, fmt.Sprintf("Redis CPU per message, group of %d\t%.2fµs\t%.2fµs\t%.2f\t(%d terms for %d workers)",
			k, nandiCPU*1e6, baseCPU*1e6, nandiCPU/baseCPU, terms, k))
	}
	for _, r := range cpuRows {
		fmt.Fprintln(tw, r)
	}

	// NATS core: one worker owning everything against a plain
	// subscription that reads the id header.
	ns := natstest.Start(b)
	publish := func(subject string, n int) {
		pub := ns.Conn()
		for i := range n {
			m := nats.NewMsg(subject)
			m.Header.Set("id", strconv.Itoa(i))
			m.Data = []byte("Dear customer, your order has shipped.")
			_ = pub.PublishMsg(m)
			if i%500 == 499 {
				_ = pub.Flush() // pace to what a subscriber can take: core NATS drops the rest
			}
		}
		_ = pub.Flush()
	}
	const natsN = speedN / 2
	var natsBase, natsNandi []float64
	for i := range trials {
		w := newWindow(natsN)
		subject := fmt.Sprintf("plain-%d", i)
		sub, _ := ns.Conn().Subscribe(subject, func(m *nats.Msg) {
			id, _ := strconv.ParseUint(m.Header.Get("id"), 10, 64)
			sink.Add(id + uint64(len(m.Data)))
			w.add(1)
		})
		_ = sub.SetPendingLimits(-1, -1)
		_ = ns.Conn().Flush()
		go publish(subject, natsN)
		w.wait(b, "the plain subscription")
		_ = sub.Unsubscribe()
		natsBase = append(natsBase, w.rate())
		var pubOnce sync.Once
		subject = fmt.Sprintf("tasks-%d", i)
		r, _ := nandiGroup(b, client, fmt.Sprintf("nats-%d", i), 1, 1, natsN, func() transport.Source {
			pubOnce.Do(func() {
				go func() {
					time.Sleep(3 * time.Second) // the worker holds its term by then
					publish(subject, natsN)
				}()
			})
			s, err := natscore.New(ns.Conn(), subject, natscore.Options{Buffer: 1 << 20})
			if err != nil {
				b.Fatal(err)
			}
			return s
		})
		natsNandi = append(natsNandi, r)
	}
	row("NATS core, 1 worker vs plain subscription", median(natsNandi), median(natsBase))

	// Sharded streams past one node: 12 streams over a Redis Cluster of 1,
	// then 3 masters (all on this machine's 2 cores), a group of 3.
	var byMasters []float64
	for _, masters := range []int{1, 3} {
		cl := redistest.StartCluster(b, masters, 0)
		cc := cl.Client()
		names := redisstream.Names("outbox", 12)
		router, _ := redisstream.NewSharded(cc, names, redisstream.Options{})
		ctx := context.Background()
		for i := 0; i < speedN; i += 2000 {
			p := cc.Pipeline()
			for j := i; j < min(i+2000, speedN); j++ {
				k := strconv.Itoa(j)
				p.XAdd(ctx, &redis.XAddArgs{Stream: router.StreamFor(k), Values: []any{"id", k, "payload", "Dear customer, your order has shipped."}})
			}
			_, _ = p.Exec(ctx)
		}
		r, _ := nandiGroup(b, func() redis.UniversalClient { return cl.Client() }, fmt.Sprintf("sharded-%d", masters), 3, 1, speedN, func() transport.Source {
			s, err := redisstream.NewSharded(cl.Client(), names, redisstream.Options{Block: 20 * time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			return s
		})
		byMasters = append(byMasters, r)
	}
	row("sharded streams (12), group of 3, cluster of 3 masters vs 1", byMasters[1], byMasters[0])
	fmt.Fprintln(tw, strings.Repeat("-", 20))
	for range b.N {
	}
}
