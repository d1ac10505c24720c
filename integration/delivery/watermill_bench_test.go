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
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nandi-go/nandi/watermillpubsub"
	"github.com/redis/go-redis/v9"
)

// wmShape is one row of BenchmarkWatermillFigures: workers subscribers of
// one consumer group over streams streams (1: one stream; more: aligned
// streams, each key in stream redisstream.Shard(key, streams)), a handler
// that takes handle before it acknowledges, conc messages in flight per
// worker (nandi: consumer.Options.Concurrency; watermill-redisstream:
// that many messages in flight: conc/streams subscribers per worker, each
// subscribed to every stream, each a consumer of the group).
type wmShape struct {
	workers, streams int
	handle           time.Duration
	conc             int
}

// wmGroup is a running group of Watermill subscribers: what each has
// received and acknowledged, and how to stop them.
type wmGroup struct {
	got   []atomic.Int64
	close func()
}

// drain acknowledges every message of ch as worker w's, in conc
// goroutines, each as a handler that takes handle and returns nil would.
func (g *wmGroup) drain(wg *sync.WaitGroup, w int, ch <-chan *message.Message, handle time.Duration, conc int) {
	for range max(conc, 1) {
		wg.Go(func() {
			for m := range ch {
				_ = len(m.Payload)
				if handle > 0 {
					time.Sleep(handle)
				}
				m.Ack()
				g.got[w].Add(1)
			}
		})
	}
}

func (g *wmGroup) total() int64 {
	var n int64
	for i := range g.got {
		n += g.got[i].Load()
	}
	return n
}

// wmFill appends entries [from, from+n) to the streams, each key j in its
// aligned stream, pipelined: entry(j) gives an entry's fields in the
// format of the subscriber that reads them.
func wmFill(c redis.UniversalClient, names []string, from, n int, entry func(key string) any) {
	ctx := context.Background()
	for i := from; i < from+n; i += 1000 {
		p := c.Pipeline()
		for j := i; j < min(i+1000, from+n); j++ {
			k := strconv.Itoa(j)
			p.XAdd(ctx, &redis.XAddArgs{Stream: names[redisstream.Shard(k, len(names))], Values: entry(k)})
		}
		_, _ = p.Exec(ctx)
	}
}

// wmMeasure warms g up (rounds of 400 entries until every worker
// receives some of one round: the group has formed and split the keys),
// then returns the rate at which it takes n entries appended while it
// runs.
func wmMeasure(b *testing.B, g *wmGroup, n int, fill func(from, n int)) float64 {
	next := 0
	redistest.WaitFor(b, 60*time.Second, "the group to form", func() bool {
		before := make([]int64, len(g.got))
		for i := range g.got {
			before[i] = g.got[i].Load()
		}
		want := g.total() + 400
		fill(next, 400)
		next += 400
		redistest.WaitFor(b, 30*time.Second, "a warm-up round", func() bool { return g.total() >= want })
		for i := range g.got {
			if g.got[i].Load() == before[i] {
				return false
			}
		}
		return true
	})
	want := g.total() + int64(n)
	start := time.Now()
	fill(next, n)
	redistest.WaitFor(b, 120*time.Second, "every entry", func() bool { return g.total() >= want })
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkWatermillFigures prints watermillpubsub's Subscriber against
// watermill-redisstream's own Subscriber (v1.4.5), side by side in one
// run on one redis-server: one worker and a group of 4, on one stream and
// on 8 aligned streams (for watermill-redisstream, every worker
// subscribes to each of the 8 streams in one consumer group, as a user
// sharding by hand would). Both handlers acknowledge at once; both read
// entries appended while they run, each in its own format (nandi: id,
// payload and the UUID header; watermill-redisstream: its marshaller's),
// pipelined alike; each subscription hands out a message at a time
// (consumer.Options' default Concurrency 1, as watermill-redisstream).
// Then handlers of 1ms (5,000 entries): one message at a time on each
// side, and nandi at Concurrency 8 against watermill-redisstream with 8
// subscriptions per worker (8 consumers of its group), 8 in flight each.
// The two do not promise the same: watermill-redisstream acknowledges
// each message (XACK) as it is handled; nandi checkpoints a shard's
// progress every CheckpointInterval (1 s) or 1,000 tasks, so a worker that
// dies hands at most that much to its successor to redo (announced).
//
//	go test -run '^$' -bench WatermillFigures -benchtime 1x ./integration/delivery/
func BenchmarkWatermillFigures(b *testing.B) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "Watermill subscribers, %s, %d entries\twatermillpubsub\twatermill-redisstream\tratio\n", time.Now().UTC().Format("2006-01-02"), benchN)
	srv := redistest.Start(b)
	c := srv.Client()
	for i, shape := range []wmShape{{1, 1, 0, 1}, {4, 1, 0, 1}, {1, 8, 0, 1}, {4, 8, 0, 1},
		{1, 1, time.Millisecond, 1}, {1, 1, time.Millisecond, 8}, {4, 8, time.Millisecond, 8}} {
		n := benchN
		if shape.handle > 0 {
			n = 5000
		}
		topic := fmt.Sprintf("wm%d", i)
		names := []string{topic}
		if shape.streams > 1 {
			names = redisstream.Names(topic, shape.streams)
		}
		ng := nandiWatermill(b, srv, topic, names, shape)
		nandi := wmMeasure(b, ng, n, func(from, n int) {
			wmFill(c, names, from, n, func(k string) any {
				return []any{"id", k, "payload", "x", watermillpubsub.UUIDHeader, watermill.NewUUID()}
			})
		})
		ng.close()
		wnames := make([]string, len(names))
		for s := range names {
			wnames[s] = "base-" + names[s]
		}
		bg := baseWatermill(srv, topic, wnames, shape)
		base := wmMeasure(b, bg, n, func(from, n int) {
			wmFill(c, wnames, from, n, func(k string) any {
				m := message.NewMessage(watermill.NewUUID(), []byte("x"))
				m.Metadata.Set("id", k)
				v, _ := wmredis.DefaultMarshallerUnmarshaller{}.Marshal(topic, m)
				return v
			})
		})
		bg.close()
		what := "one stream"
		if shape.streams > 1 {
			what = fmt.Sprintf("%d aligned streams", shape.streams)
		}
		if shape.handle > 0 {
			what += fmt.Sprintf(", %v handler, %d in flight", shape.handle, shape.conc)
		}
		fmt.Fprintf(tw, "%d worker(s), %s (msg/s)\t%.0f\t%.0f\t%.2f\n", shape.workers, what, nandi, base, nandi/base)
	}
}

// nandiWatermill starts workers watermillpubsub Subscribers of one group
// on topic, read from names (one stream, or aligned streams).
func nandiWatermill(b *testing.B, srv *redistest.Server, topic string, names []string, shape wmShape) *wmGroup {
	workers := shape.workers
	g := &wmGroup{got: make([]atomic.Int64, workers)}
	var wg sync.WaitGroup
	var subs []*watermillpubsub.Subscriber
	for w := range workers {
		client := srv.Client()
		sub, err := watermillpubsub.NewSubscriber(watermillpubsub.SubscriberConfig{
			Client: client,
			Source: func(string) (transport.Source, error) {
				if len(names) == 1 {
					return redisstream.New(client, names[0], redisstream.Options{})
				}
				return redisstream.NewSharded(client, names, redisstream.Options{})
			},
			ConsumerGroup: "bench",
			Lease:         partition.Options{Interval: 300 * time.Millisecond},
			Consumer:      consumer.Options{Concurrency: shape.conc},
		}, watermill.NopLogger{})
		if err != nil {
			b.Fatal(err)
		}
		ch, err := sub.Subscribe(context.Background(), topic)
		if err != nil {
			b.Fatal(err)
		}
		g.drain(&wg, w, ch, shape.handle, shape.conc)
		subs = append(subs, sub)
	}
	g.close = sync.OnceFunc(func() {
		for _, s := range subs {
			_ = s.Close()
		}
		wg.Wait()
	})
	b.Cleanup(g.close)
	return g
}

// baseWatermill starts workers watermill-redisstream Subscribers of one
// consumer group, each subscribed to every one of names.
func baseWatermill(srv *redistest.Server, topic string, names []string, shape wmShape) *wmGroup {
	g := &wmGroup{got: make([]atomic.Int64, shape.workers)}
	var wg sync.WaitGroup
	var subs []*wmredis.Subscriber
	// As many messages in flight per worker as nandi's Concurrency: a
	// subscription to each stream hands out one at a time, so a worker has
	// conc/streams subscribers of every stream (at least one).
	perWorker := max(shape.conc/len(names), 1)
	for w := range shape.workers {
		for c := range perWorker {
			sub, _ := wmredis.NewSubscriber(wmredis.SubscriberConfig{
				Client: srv.Client(), ConsumerGroup: "bench-" + topic, Consumer: strconv.Itoa(w) + "-" + strconv.Itoa(c),
				OldestId: "0", BlockTime: 100 * time.Millisecond, DisableIndefiniteInitialBlock: true,
			}, watermill.NopLogger{})
			for _, name := range names {
				ch, _ := sub.Subscribe(context.Background(), name)
				g.drain(&wg, w, ch, shape.handle, 1)
			}
			subs = append(subs, sub)
		}
	}
	g.close = func() {
		for _, s := range subs {
			_ = s.Close()
		}
		wg.Wait()
	}
	return g
}
