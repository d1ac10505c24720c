package delivery

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
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

const benchN = 50_000

// xadd appends n entries (id, payload) to stream in pipelines.
func xadd(c redis.UniversalClient, stream string, n int) {
	ctx := context.Background()
	for i := 0; i < n; i += 1000 {
		p := c.Pipeline()
		for j := i; j < min(i+1000, n); j++ {
			p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"id", j, "payload", "x"}})
		}
		_, _ = p.Exec(ctx)
	}
}

// workers starts n consumers of one group over src, waits until they form
// a group of n, and returns the count handled and a stop function.
func workers(b *testing.B, srv *redistest.Server, group string, n int, src func() transport.Source) (*atomic.Int64, func()) {
	var handled atomic.Int64
	var leases []*partition.Lease
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		l, _ := partition.New(srv.Client(), partition.Options{Name: group, Interval: 300 * time.Millisecond})
		leases = append(leases, l)
		c, err := consumer.New(l, src(), func(context.Context, *transport.Message) error { handled.Add(1); return nil }, consumer.Options{Concurrency: 8})
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() { _ = c.Run(ctx) })
	}
	redistest.WaitFor(b, 30*time.Second, "the group to form", func() bool {
		for _, l := range leases {
			if a, ok := l.Current(); !ok || a.Replicas != n {
				return false
			}
		}
		return true
	})
	return &handled, func() { cancel(); wg.Wait() }
}

func until(b *testing.B, what string, cond func() bool) time.Duration {
	start := time.Now()
	redistest.WaitFor(b, 60*time.Second, what, cond)
	return time.Since(start)
}

// BenchmarkTransportFigures prints the transports' figures against the
// plain clients on the same peers:
//
//	go test -run '^$' -bench TransportFigures -benchtime 1x ./integration/delivery/
func BenchmarkTransportFigures(b *testing.B) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "figure\tnandi\tbaseline\tratio")
	row := func(name string, nandi, base float64, unit string) {
		fmt.Fprintf(tw, "%s\t%.0f %s\t%.0f %s\t%.2f\n", name, nandi, unit, base, unit, nandi/base)
	}
	srv := redistest.Start(b)
	c := srv.Client()
	ctx := context.Background()

	// Redis Streams, one worker owning everything, against a plain XREAD
	// loop over the same 50,000 entries.
	xadd(c, "one", benchN)
	start := time.Now()
	last, seen := "0-0", 0
	for seen < benchN {
		res, _ := c.XRead(ctx, &redis.XReadArgs{Streams: []string{"one", last}, Count: 512, Block: 100 * time.Millisecond}).Result()
		for _, m := range res[0].Messages {
			seen++
			last = m.ID
		}
	}
	plain := float64(benchN) / time.Since(start).Seconds()
	handled, stop := workers(b, srv, "bench-one", 1, func() transport.Source {
		s, _ := redisstream.New(srv.Client(), "one", redisstream.Options{})
		return s
	})
	took := until(b, "one worker to handle the stream", func() bool { return handled.Load() >= benchN })
	stop()
	row("Redis Streams, 1 worker owning all (msg/s)", float64(benchN)/took.Seconds(), plain, "msg/s")

	// A group of 4 against a 4-consumer XREADGROUP/XACK group and against
	// watermill-redisstream's consumer group: consumers running, then
	// 50,000 entries appended, until all are handled.
	handled, stop = workers(b, srv, "bench-four", 4, func() transport.Source {
		s, _ := redisstream.New(srv.Client(), "four", redisstream.Options{})
		return s
	})
	took = until(b, "four workers", func() bool { xaddOnce(c, "four"); return handled.Load() >= benchN })
	stop()
	nandi4 := float64(benchN) / took.Seconds()

	c.XGroupCreateMkStream(ctx, "grp", "g", "$")
	var got atomic.Int64
	gctx, gcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for gctx.Err() == nil {
				res, err := c.XReadGroup(gctx, &redis.XReadGroupArgs{Group: "g", Consumer: strconv.Itoa(w), Streams: []string{"grp", ">"}, Count: 512, Block: 100 * time.Millisecond}).Result()
				if err != nil {
					continue
				}
				var ids []string
				for _, m := range res[0].Messages {
					ids = append(ids, m.ID)
				}
				c.XAck(gctx, "grp", "g", ids...)
				got.Add(int64(len(ids)))
			}
		})
	}
	took = until(b, "the XREADGROUP group", func() bool { xaddOnce(c, "grp"); return got.Load() >= benchN })
	gcancel()
	wg.Wait()
	row("Redis Streams, group of 4 vs XREADGROUP+XACK x4 (msg/s)", nandi4, float64(benchN)/took.Seconds(), "msg/s")

	var wmGot atomic.Int64
	wctx, wcancel := context.WithCancel(ctx)
	for w := range 4 {
		sub, _ := wmredis.NewSubscriber(wmredis.SubscriberConfig{Client: srv.Client(), ConsumerGroup: "wm", Consumer: strconv.Itoa(w), OldestId: "0", BlockTime: 100 * time.Millisecond, DisableIndefiniteInitialBlock: true}, watermill.NopLogger{})
		ch, _ := sub.Subscribe(wctx, "wm")
		wg.Go(func() {
			defer sub.Close()
			for m := range ch {
				wmGot.Add(1)
				m.Ack()
			}
		})
	}
	took = until(b, "watermill-redisstream", func() bool {
		if !produced["wm"] {
			produced["wm"] = true
			// The same entries in watermill-redisstream's own format.
			for i := 0; i < benchN; i += 1000 {
				p := c.Pipeline()
				for j := i; j < min(i+1000, benchN); j++ {
					m := message.NewMessage(watermill.NewUUID(), []byte("x"))
					m.Metadata.Set("id", strconv.Itoa(j))
					v, _ := wmredis.DefaultMarshallerUnmarshaller{}.Marshal("wm", m)
					p.XAdd(ctx, &redis.XAddArgs{Stream: "wm", Values: v})
				}
				_, _ = p.Exec(ctx)
			}
		}
		return wmGot.Load() >= benchN
	})
	wcancel()
	wg.Wait()
	row("Redis Streams, group of 4 vs watermill-redisstream x4 (msg/s)", nandi4, float64(benchN)/took.Seconds(), "msg/s")

	// NATS core, one worker owning all, against a plain subscription.
	ns := natstest.Start(b)
	pub := ns.Conn()
	publish := func(subject string) {
		for i := range benchN {
			m := nats.NewMsg(subject)
			m.Header.Set("id", strconv.Itoa(i))
			_ = pub.PublishMsg(m)
			if i%1000 == 999 {
				_ = pub.Flush() // pace to what a subscriber can take: core NATS drops the rest
			}
		}
		_ = pub.Flush()
	}
	var plainGot atomic.Int64
	sub, _ := ns.Conn().Subscribe("plain", func(*nats.Msg) { plainGot.Add(1) })
	_ = sub.SetPendingLimits(-1, -1)
	_ = ns.Conn().Flush()
	took = until(b, fmt.Sprintf("the plain subscription (%d)", plainGot.Load()), func() bool {
		if plainGot.Load() == 0 {
			publish("plain")
		}
		return plainGot.Load() >= benchN
	})
	_ = sub.Unsubscribe()
	base := float64(benchN) / took.Seconds()
	handled, stop = workers(b, srv, "bench-nats", 1, func() transport.Source {
		s, _ := natscore.New(ns.Conn(), "tasks", natscore.Options{})
		return s
	})
	took = until(b, "the NATS core worker", func() bool {
		if handled.Load() == 0 {
			publish("tasks")
		}
		return handled.Load() >= benchN
	})
	stop()
	row("NATS core, 1 worker owning all vs plain subscription (msg/s)", float64(benchN)/took.Seconds(), base, "msg/s")
	for range b.N {
	}
}

var produced = map[string]bool{}

// xaddOnce appends the benchmark's entries to stream the first time it is
// called for it (inside the timed wait).
func xaddOnce(c redis.UniversalClient, stream string) {
	if !produced[stream] {
		produced[stream] = true
		xadd(c, stream, benchN)
	}
}

func newNoopConsumer(l *partition.Lease, src transport.Source) (*consumer.Consumer, error) {
	return consumer.New(l, src, func(context.Context, *transport.Message) error { return nil }, consumer.Options{})
}
