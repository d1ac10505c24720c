package kafkatopic_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/segmentio/kafka-go"
)

// A Producer over a Writer with no Balancer writes each key to its aligned
// partition (kfake, 6 partitions), in order per key, with its headers and
// the trace context Inject adds; an aligned Source reads them there.
func TestProducerWritesAligned(t *testing.T) {
	const topic, partitions = "produced", 6
	addrs := cluster(t, 1, partitions, topic)
	tr := &kafka.Transport{}
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: topic, Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	t.Cleanup(func() {
		_ = w.Close()
		tr.CloseIdleConnections()
	})
	p, err := kafkatopic.NewProducer(w, kafkatopic.ProducerOptions{Inject: func(_ context.Context, h map[string]string) { h["traceparent"] = "00-trace" }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const keys, each = 30, 3
	for seq := range each {
		var batch []transport.Message
		for k := range keys {
			key := strconv.Itoa(k * 7)
			batch = append(batch, transport.Message{Key: key, Payload: []byte(key + "/" + strconv.Itoa(seq)), Headers: map[string]string{"tenant": "t"}})
		}
		if seq == 0 {
			for _, m := range batch {
				if err := p.Publish(ctx, m.Key, m.Payload, m.Headers); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		if err := p.PublishBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	src, err := kafkatopic.New(addrs, topic, kafkatopic.Options{Aligned: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	r, err := src.Open(ctx, make([]transport.Position, partitions))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	next := map[string]int{}
	n := 0
	deadline := time.Now().Add(20 * time.Second)
	for n < keys*each && time.Now().Before(deadline) {
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		ms, err := r.Fetch(fctx)
		cancel()
		if err != nil && fctx.Err() == nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			n++
			if want := int(transport.TaskID(m.Key) % partitions); m.Shard != want {
				t.Errorf("key %s in partition %d; want %d", m.Key, m.Shard, want)
			}
			if want := m.Key + "/" + strconv.Itoa(next[m.Key]); string(m.Payload) != want {
				t.Errorf("payload %q; want %q (per-key order)", m.Payload, want)
			}
			next[m.Key]++
			if m.Headers["traceparent"] != "00-trace" || m.Headers["tenant"] != "t" {
				t.Errorf("headers %v; want tenant and traceparent", m.Headers)
			}
		}
	}
	if n != keys*each {
		t.Fatalf("read %d messages; want %d", n, keys*each)
	}
}

// A Writer whose balancer ignores the key is refused, and so is a task
// without a key, before anything is written.
func TestProducerRefusesWhatLosesOrder(t *testing.T) {
	for _, b := range []kafka.Balancer{&kafka.RoundRobin{}, &kafka.LeastBytes{}} {
		if _, err := kafkatopic.NewProducer(&kafka.Writer{Topic: "x", Balancer: b}, kafkatopic.ProducerOptions{}); !errors.Is(err, transport.ErrInvalidOptions) {
			t.Errorf("NewProducer with %T: %v; want a refusal", b, err)
		} else {
			t.Log(err)
		}
	}
	if _, err := kafkatopic.NewProducer(&kafka.Writer{}, kafkatopic.ProducerOptions{}); err == nil {
		t.Error("NewProducer with no Topic: no error")
	}
	w := &kafka.Writer{Topic: "x", Addr: kafka.TCP("127.0.0.1:1")}
	p, err := kafkatopic.NewProducer(w, kafkatopic.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// kafka-go's default, RequireNone, returns before the broker has the
	// write: the next one may overtake it on another connection.
	if w.RequiredAcks != kafka.RequireAll {
		t.Errorf("the Writer's RequiredAcks after NewProducer: %v; want RequireAll", w.RequiredAcks)
	}
	if err := p.PublishBatch(context.Background(), []transport.Message{{Key: "a"}, {Key: ""}}); !errors.Is(err, transport.ErrInvalidTask) {
		t.Errorf("PublishBatch with an empty key: %v; want ErrInvalidTask", err)
	}
}
