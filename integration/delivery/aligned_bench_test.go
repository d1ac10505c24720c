package delivery

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nandi-go/nandi/internal/natstest"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/nandi-go/nandi/transport/natsjs"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// fillAligned writes n entries (keys "0".."n-1") to the aligned streams
// names, each key to redisstream.Shard's stream, pipelined.
func fillAligned(c redis.UniversalClient, names []string, n int) {
	ctx := context.Background()
	for i := 0; i < n; i += 2000 {
		p := c.Pipeline()
		for j := i; j < min(i+2000, n); j++ {
			k := strconv.Itoa(j)
			p.XAdd(ctx, &redis.XAddArgs{Stream: names[redisstream.Shard(k, len(names))], Values: []any{"id", k, "payload", "Dear customer, your order has shipped."}})
		}
		_, _ = p.Exec(ctx)
	}
}

// BenchmarkAlignedFigures prints issue 22's targets: groups of 4, 16 and 64
// over 48 aligned streams against XREADGROUP+XACK with as many consumers
// (rate and Redis CPU per message); Kafka (kfake) over 12 partitions
// written with kafkatopic.Balancer, counting the records fetched per
// group; JetStream over 12 subjects, counting the messages delivered.
//
//	go test -run '^$' -bench AlignedFigures -benchtime 1x ./integration/delivery/
func BenchmarkAlignedFigures(b *testing.B) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "aligned shards, %s, %d entries\tnandi\tbaseline\tratio\n", time.Now().UTC().Format("2006-01-02"), speedN)
	srv := redistest.Start(b)
	c := srv.Client()
	client := func() redis.UniversalClient { return srv.Client() }
	// The baseline a user would pick: one stream, a consumer group.
	fillStream(c, "base", speedN)
	run := func(k, shards int, unaligned bool) (rate, cpu float64) {
		names := redisstream.Names(fmt.Sprintf("g%d-%d-%v", k, shards, unaligned), shards)
		fillAligned(c, names, speedN)
		rate, _, used := nandiGroupMeasured(b, client, fmt.Sprintf("aligned-%d-%d-%v", k, shards, unaligned), k, 1, speedN, func() transport.Source {
			s, err := redisstream.NewSharded(srv.Client(), names, redisstream.Options{Unaligned: unaligned})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}, func() float64 { return redisCPU(srv) })
		return rate, used / speedN
	}
	for _, k := range []int{4, 16} {
		cpu0 := redisCPU(srv)
		base := xreadgroup(b, c, "base", k, speedN)
		baseCPU := (redisCPU(srv) - cpu0) / speedN
		r, cpu := run(k, 48, false)
		ur, ucpu := run(k, 48, true)
		fmt.Fprintf(tw, "group of %d over 48 aligned streams vs XREADGROUP+XACK x%d on one stream, rate\t%.0f/s\t%.0f/s\t%.2f\n", k, k, r, base, r/base)
		fmt.Fprintf(tw, "group of %d, Redis CPU per message\t%.2fµs\t%.2fµs\t%.2f\n", k, cpu*1e6, baseCPU*1e6, cpu/baseCPU)
		fmt.Fprintf(tw, "  the same 48 streams read unaligned (as before), rate\t%.0f/s\t%.0f/s\t%.2f\n", ur, base, ur/base)
		fmt.Fprintf(tw, "  the same 48 streams read unaligned, Redis CPU per message\t%.2fµs\t%.2fµs\t%.2f\n", ucpu*1e6, baseCPU*1e6, ucpu/baseCPU)
	}
	// Flat as the group grows: 192 streams (a multiple of 4, 16 and 64);
	// 64 workers in one process share 2 cores, so their rate says little.
	var cpus []string
	for _, k := range []int{4, 16, 64} {
		_, cpu := run(k, 192, false)
		cpus = append(cpus, fmt.Sprintf("%.2f", cpu*1e6))
	}
	fmt.Fprintf(tw, "Redis CPU per message over 192 aligned streams, 4 / 16 / 64 workers\t%s µs\t\t\n", strings.Join(cpus, " / "))

	// Kafka through kfake: each record fetched once per group.
	const kafkaN = 24_000
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(12, "outbox"))
	if err != nil {
		b.Fatal(err)
	}
	defer kc.Close()
	addrs := kc.ListenAddrs()
	tr := &kafka.Transport{}
	wr := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: "outbox", Balancer: kafkatopic.Balancer{}, Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	var batch []kafka.Message
	for i := range kafkaN {
		batch = append(batch, kafka.Message{Key: []byte(strconv.Itoa(i)), Value: []byte("x")})
		if len(batch) == 500 {
			if err := wr.WriteMessages(context.Background(), batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	_ = wr.Close()
	tr.CloseIdleConnections()
	for _, k := range []int{4, 6, 12} {
		_, st := nandiGroup(b, client, fmt.Sprintf("kafka-%d", k), k, 1, kafkaN, func() transport.Source {
			s, err := kafkatopic.New(addrs, "outbox", kafkatopic.Options{Aligned: true})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s
		})
		var read int64
		for _, s := range st {
			read += s.Read
		}
		fmt.Fprintf(tw, "Kafka (kfake), 12 partitions, %d workers: records fetched per record\t%.2f\t1 (a consumer group)\t%.2f\n", k, float64(read)/kafkaN, float64(read)/kafkaN)
	}

	// JetStream over 12 subjects: each message delivered to one worker.
	ns := natstest.Start(b)
	js, err := jetstream.New(ns.Conn())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "AL", Subjects: []string{"al.*"}}); err != nil {
		b.Fatal(err)
	}
	const jsN = 24_000
	opts := natsjs.Options{Shards: 12, SubjectPrefix: "al"}
	src0, _ := natsjs.New(js, "AL", opts)
	var published atomic.Bool
	pub := ns.Conn()
	for i := range jsN {
		k := strconv.Itoa(i)
		m := nats.NewMsg(src0.SubjectFor(k))
		m.Header.Set("id", k)
		m.Data = []byte("x")
		_ = pub.PublishMsg(m)
	}
	_ = pub.Flush()
	published.Store(true)
	for _, k := range []int{4, 6, 12} {
		_, st := nandiGroup(b, client, fmt.Sprintf("js-%d", k), k, 1, jsN, func() transport.Source {
			wjs, _ := jetstream.New(ns.Conn())
			s, err := natsjs.New(wjs, "AL", opts)
			if err != nil {
				b.Fatal(err)
			}
			return s
		})
		var read int64
		for _, s := range st {
			read += s.Read
		}
		fmt.Fprintf(tw, "JetStream, 12 subjects, %d workers: messages delivered per message\t%.2f\t1\t%.2f\n", k, float64(read)/jsN, float64(read)/jsN)
	}

	for range b.N {
	}
}
