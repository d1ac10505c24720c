package delivery

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// BenchmarkKafkaJoinFigures prints the time from a third worker joining to
// full coverage, for a nandi group on a shared topic against a kafka-go
// consumer group, on the same kfake cluster (6 partitions):
//
//	go test -run '^$' -bench KafkaJoinFigures -benchtime 1x ./integration/delivery/
func BenchmarkKafkaJoinFigures(b *testing.B) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(6, "shared"), kfake.SeedTopics(6, "grouped"))
	if err != nil {
		b.Fatal(err)
	}
	defer kc.Close()
	addrs := kc.ListenAddrs()
	srv := redistest.Start(b)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "figure\ttrials\tmedian\tmax")
	report := func(name string, xs []time.Duration) {
		med, mx := durations(xs)
		fmt.Fprintf(tw, "%s\t%d\t%v\t%v\n", name, len(xs), med.Round(time.Millisecond), mx.Round(time.Millisecond))
	}

	// nandi: two workers hold 0 and 1 of 2; a third starts; full coverage
	// is all three holding their share of 3.
	var nandi []time.Duration
	for trial := range 5 {
		group := fmt.Sprintf("join-%d", trial)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var leases []*partition.Lease
		start := func() {
			l, _ := partition.New(srv.Client(), partition.Options{Name: group, Interval: 300 * time.Millisecond})
			src, _ := kafkatopic.New(addrs, "shared", kafkatopic.Options{})
			c, _ := newNoopConsumer(l, src)
			leases = append(leases, l)
			wg.Go(func() { _ = c.Run(ctx); _ = src.Close() })
		}
		covered := func(n int) func() bool {
			return func() bool {
				for _, l := range leases {
					if a, ok := l.Current(); !ok || a.Replicas != n {
						return false
					}
				}
				return true
			}
		}
		start()
		start()
		redistest.WaitFor(b, 30*time.Second, "two workers", covered(2))
		t0 := time.Now()
		start()
		redistest.WaitFor(b, 30*time.Second, "three workers", covered(3))
		nandi = append(nandi, time.Since(t0))
		cancel()
		wg.Wait()
	}
	report("nandi shared topic, 300ms interval: third worker joins -> all hold 1/3", nandi)

	// kafka-go consumer group, with a heartbeat as often as nandi
	// registers: two readers consume; a third joins; full coverage is the
	// third receiving messages after the rebalance.
	tr := &kafka.Transport{}
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: "grouped", Balancer: &kafka.RoundRobin{}, Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer func() { _ = w.Close(); tr.CloseIdleConnections() }()
	pctx, stopProducing := context.WithCancel(context.Background())
	var pwg sync.WaitGroup
	pwg.Go(func() {
		for i := 0; pctx.Err() == nil; i++ {
			_ = w.WriteMessages(pctx, kafka.Message{Key: []byte(strconv.Itoa(i)), Value: []byte("x")})
		}
	})
	var kgo []time.Duration
	for trial := range 3 {
		group := fmt.Sprintf("g-%d", trial)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		reader := func(got *atomic.Int64) {
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: addrs, Topic: "grouped", GroupID: group, MaxWait: 100 * time.Millisecond,
				HeartbeatInterval: 300 * time.Millisecond, SessionTimeout: 6 * time.Second, RebalanceTimeout: 3 * time.Second, JoinGroupBackoff: 100 * time.Millisecond})
			wg.Go(func() {
				defer r.Close()
				for {
					if _, err := r.ReadMessage(ctx); err != nil {
						return
					}
					got.Add(1)
				}
			})
		}
		var a, bb, third atomic.Int64
		reader(&a)
		reader(&bb)
		redistest.WaitFor(b, 60*time.Second, "two group readers consuming", func() bool { return a.Load() > 0 && bb.Load() > 0 })
		t0 := time.Now()
		reader(&third)
		redistest.WaitFor(b, 60*time.Second, "the third group reader consuming", func() bool { return third.Load() > 0 })
		kgo = append(kgo, time.Since(t0))
		cancel()
		wg.Wait()
	}
	stopProducing()
	pwg.Wait()
	report("kafka-go consumer group, 300ms heartbeat: third reader joins -> it consumes", kgo)
	for range b.N {
	}
}

func durations(xs []time.Duration) (med, mx time.Duration) {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)-1]
}
