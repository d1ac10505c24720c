package delivery

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/natstest"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/nandi-go/nandi/transport/memory"
	"github.com/nandi-go/nandi/transport/natsjs"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// throughSizes is the scenario of issue 22 on an aligned source of 12
// shards: messages published while the group goes 3 -> 5 -> 2 -> 4
// workers by clean starts and stops (sizes that divide 12 and one that
// does not); then every message must have been handled exactly once, in
// order per id, only by its owner at that moment. Each worker reads only
// the shards its lease can own ids in.
func throughSizes(t *testing.T, f *fleet, publish func(key string, payload []byte)) {
	ids, each := 3000, 8
	f.ids = ids
	f.live = map[int]*member{}
	f.copt = consumer.Options{Concurrency: 8, CheckpointInterval: 50 * time.Millisecond}
	f.work = func() { time.Sleep(time.Duration(rand.Int64N(int64(2 * time.Millisecond)))) }
	for range 3 {
		f.start()
	}
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for s := range each {
			for x := range ids {
				publish(strconv.Itoa(x), fmt.Appendf(nil, "%d/%d", x, s))
				if x%100 == 0 {
					time.Sleep(10 * time.Millisecond) // about 2.4 seconds in all
				}
			}
		}
	}()
	resize := func(n int) {
		for len(f.live) < n {
			f.start()
		}
		var ids []int
		for id := range f.live {
			ids = append(ids, id)
		}
		sort.Ints(ids)
		for len(f.live) > n {
			f.stop(ids[0])
			ids = ids[1:]
		}
	}
	for _, n := range []int{5, 2, 4} {
		time.Sleep(1500 * time.Millisecond)
		resize(n)
	}
	<-produced
	deadline := time.Now().Add(60 * time.Second)
	for f.handled() < ids*each && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // anything handled twice shows up now
	// Each worker holding a share reads exactly the shards it can own ids
	// in. A worker whose term has just begun reads nothing until it has
	// opened the log (Kafka's metadata and readers take a while), so the
	// group is given until a deadline to be seen settled, and a mismatch
	// left then fails.
	deadline = time.Now().Add(10 * time.Second)
	for {
		mismatch := ""
		for _, m := range f.live {
			a, ok := m.c.Lease().Current()
			if got := m.c.Reading(); ok && fmt.Sprint(got) != fmt.Sprint(a.ShardsOf(12)) {
				mismatch = fmt.Sprintf("%d of %d reads shards %v; want %v", a.Index, a.Replicas, got, a.ShardsOf(12))
			}
		}
		if mismatch == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Error(mismatch)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.stopAll()
	f.check(ids, each)
}

func TestAlignedMemoryLogThroughGroupSizes(t *testing.T) {
	log := memory.NewAlignedLog(12)
	f := &fleet{t: t, srv: redistest.Start(t), opts: partition.Options{Name: groupName(t), Interval: 200 * time.Millisecond}, src: log.Source}
	throughSizes(t, f, func(k string, p []byte) { log.Append(k, p) })
}

func TestAlignedRedisStreamsThroughGroupSizes(t *testing.T) {
	srv := redistest.Start(t)
	names := redisstream.Names("outbox", 12)
	pub := srv.Client()
	defer pub.Close()
	src0, err := redisstream.NewSharded(pub, names, redisstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, srv: srv, opts: partition.Options{Name: groupName(t), Interval: 200 * time.Millisecond}}
	f.src = func() transport.Source {
		src, err := redisstream.NewSharded(srv.Client(), names, redisstream.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	throughSizes(t, f, func(k string, p []byte) {
		if err := pub.XAdd(context.Background(), &redis.XAddArgs{Stream: src0.StreamFor(k), Values: []any{"id", k, "payload", p}}).Err(); err != nil {
			t.Error(err)
		}
	})
}

// Kafka through kfake: 12 partitions written with kafkatopic.Balancer.
func TestAlignedKafkaThroughGroupSizes(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(12, "outbox"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	addrs := kc.ListenAddrs()
	f := &fleet{t: t, srv: redistest.Start(t), opts: partition.Options{Name: groupName(t), Interval: 200 * time.Millisecond}}
	f.src = func() transport.Source {
		src, err := kafkatopic.New(addrs, "outbox", kafkatopic.Options{Aligned: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = src.Close() })
		return src
	}
	tr := &kafka.Transport{}
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: "outbox", Balancer: kafkatopic.Balancer{}, Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer func() {
		_ = w.Close()
		tr.CloseIdleConnections()
	}()
	var batch []kafka.Message
	throughSizes(t, f, func(k string, p []byte) {
		batch = append(batch, kafka.Message{Key: []byte(k), Value: p})
		if len(batch) == 100 { // 24,000 is a multiple: nothing is left over
			if err := w.WriteMessages(context.Background(), batch...); err != nil {
				t.Error(err)
			}
			batch = batch[:0]
		}
	})
}

// JetStream: a subject per shard (outbox.0 .. outbox.11).
func TestAlignedJetStreamThroughGroupSizes(t *testing.T) {
	ns := natstest.Start(t)
	js, err := jetstream.New(ns.Conn())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUTBOX", Subjects: []string{"outbox.*"}}); err != nil {
		t.Fatal(err)
	}
	opts := natsjs.Options{Shards: 12, SubjectPrefix: "outbox"}
	src0, err := natsjs.New(js, "OUTBOX", opts)
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, srv: redistest.Start(t), opts: partition.Options{Name: groupName(t), Interval: 200 * time.Millisecond}}
	f.src = func() transport.Source {
		wjs, err := jetstream.New(ns.Conn())
		if err != nil {
			t.Fatal(err)
		}
		src, err := natsjs.New(wjs, "OUTBOX", opts)
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	pub := ns.Conn()
	throughSizes(t, f, func(k string, p []byte) {
		m := nats.NewMsg(src0.SubjectFor(k))
		m.Header.Set("id", k)
		m.Data = p
		if err := pub.PublishMsg(m); err != nil { // JetStream stores core publishes in order
			t.Error(err)
		}
	})
}
