package delivery

import (
	"context"
	"testing"
	"time"

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

// publisher writes one message of a scenario: key its task id.
type publisher = func(key string, payload []byte)

// The aligned logs the scenarios run on, one per transport: a fleet over
// a log of the given shards (the group named after the test, a 200ms
// interval, the leases on a real redis-server) and the producer that
// writes each key to its shard (id % shards). Each stops its servers when
// the test ends.

func alignedFleet(t *testing.T, srv *redistest.Server, src func() transport.Source) *fleet {
	return &fleet{t: t, srv: srv, opts: partition.Options{Name: groupName(t), Interval: 200 * time.Millisecond}, src: src, live: map[int]*member{}}
}

func alignedMemoryLog(t *testing.T, shards int) (*fleet, publisher) {
	log := memory.NewAlignedLog(shards)
	return alignedFleet(t, redistest.Start(t), log.Source), func(k string, p []byte) { log.Append(k, p) }
}

func alignedRedisStreams(t *testing.T, shards int) (*fleet, publisher) {
	srv := redistest.Start(t)
	names := redisstream.Names("outbox", shards)
	pub := srv.Client()
	t.Cleanup(func() { _ = pub.Close() })
	router, err := redisstream.NewSharded(pub, names, redisstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := alignedFleet(t, srv, func() transport.Source {
		src, err := redisstream.NewSharded(srv.Client(), names, redisstream.Options{Trim: true, Block: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return src
	})
	return f, func(k string, p []byte) {
		if err := pub.XAdd(context.Background(), &redis.XAddArgs{Stream: router.StreamFor(k), Values: []any{"id", k, "payload", p}}).Err(); err != nil {
			t.Error(err)
		}
	}
}

// alignedKafkaTopic is a topic on kfake (a Kafka protocol peer, not a
// Kafka broker) written with kafkatopic.Balancer by kafka-go's Writer, a
// hundred messages a write: a scenario publishes a multiple of 100.
func alignedKafkaTopic(t *testing.T, shards int) (*fleet, publisher) {
	f, addrs := kafkaLog(t, shards)
	tr := &kafka.Transport{}
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: "outbox", Balancer: kafkatopic.Balancer{}, Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	t.Cleanup(func() {
		_ = w.Close()
		tr.CloseIdleConnections()
	})
	var batch []kafka.Message
	return f, func(k string, p []byte) {
		batch = append(batch, kafka.Message{Key: []byte(k), Value: p})
		if len(batch) == 100 {
			if err := w.WriteMessages(context.Background(), batch...); err != nil {
				t.Error(err)
			}
			batch = batch[:0]
		}
	}
}

// kafkaLog is the topic "outbox" of shards partitions on kfake, and a
// fleet reading it as aligned; it returns the fleet and kfake's addresses.
func kafkaLog(t *testing.T, shards int) (*fleet, []string) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(shards), "outbox"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	addrs := kc.ListenAddrs()
	return alignedFleet(t, redistest.Start(t), func() transport.Source {
		src, err := kafkatopic.New(addrs, "outbox", kafkatopic.Options{Aligned: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = src.Close() })
		return src
	}), addrs
}

// alignedJetStream is a stream with a subject per shard (outbox.0 ...),
// on an embedded nats-server.
func alignedJetStream(t *testing.T, shards int) (*fleet, publisher) {
	f, router, pub := jetStreamLog(t, shards)
	return f, func(k string, p []byte) { publishTo(t, pub, router.SubjectFor(k), k, p) }
}

// jetStreamLog is alignedJetStream's stream and fleet, the producer's
// router (which subject a key goes to) and its connection.
func jetStreamLog(t *testing.T, shards int) (*fleet, *natsjs.Source, *nats.Conn) {
	ns := natstest.Start(t)
	js, err := jetstream.New(ns.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "OUTBOX", Subjects: []string{"outbox.*"}}); err != nil {
		t.Fatal(err)
	}
	opts := natsjs.Options{Shards: shards, SubjectPrefix: "outbox"}
	router, err := natsjs.New(js, "OUTBOX", opts)
	if err != nil {
		t.Fatal(err)
	}
	f := alignedFleet(t, redistest.Start(t), func() transport.Source {
		wjs, err := jetstream.New(ns.Conn())
		if err != nil {
			t.Fatal(err)
		}
		src, err := natsjs.New(wjs, "OUTBOX", opts)
		if err != nil {
			t.Fatal(err)
		}
		return src
	})
	return f, router, ns.Conn()
}

// publishTo publishes a message to subject, with key in the id header
// (none when key is empty).
func publishTo(t *testing.T, nc *nats.Conn, subject, key string, payload []byte) {
	m := nats.NewMsg(subject)
	if key != "" {
		m.Header.Set("id", key)
	}
	m.Data = payload
	if err := nc.PublishMsg(m); err != nil { // JetStream stores core publishes in order
		t.Error(err)
	}
}
