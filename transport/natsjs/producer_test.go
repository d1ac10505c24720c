package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nandi-go/nandi/internal/natstest"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/natsjs"
	"github.com/nandi-go/nandi/transport/transporttest"
	"github.com/nats-io/nats.go/jetstream"
)

// The conformance suite over a sharded stream whose tasks a Producer
// published.
func TestConformanceThroughProducer(t *testing.T) {
	srv := natstest.Start(t)
	js, err := jetstream.New(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	transporttest.Run(t, transporttest.Harness{New: func(t *testing.T) (transport.Source, func(string, []byte)) {
		n := streams.Add(1)
		name, prefix := fmt.Sprintf("P%d", n), fmt.Sprintf("p%d.tasks", n)
		if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".*"}}); err != nil {
			t.Fatal(err)
		}
		src, err := natsjs.New(js, name, natsjs.Options{Shards: 4, SubjectPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		p, err := src.Producer(natsjs.ProducerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return src, func(k string, payload []byte) {
			if err := p.Publish(context.Background(), k, payload, nil); err != nil {
				t.Fatal(err)
			}
		}
	}})
}

// A batch lands on each key's shard subject, in order per key, with its
// headers and the trace context; what the source could not read as a task
// is refused before anything is published.
func TestProducerBatch(t *testing.T) {
	srv := natstest.Start(t)
	js, err := jetstream.New(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BATCH", Subjects: []string{"batch.*"}}); err != nil {
		t.Fatal(err)
	}
	src, err := natsjs.New(js, "BATCH", natsjs.Options{Shards: 6, SubjectPrefix: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := src.Producer(natsjs.ProducerOptions{Inject: func(_ context.Context, h map[string]string) { h["traceparent"] = "00-trace" }})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]transport.Message{{{Key: "a"}, {Key: ""}}, {{Key: "a", Headers: map[string]string{"id": "b"}}}} {
		if err := p.PublishBatch(ctx, bad); !errors.Is(err, transport.ErrInvalidTask) {
			t.Errorf("PublishBatch(%v) = %v; want ErrInvalidTask", bad, err)
		}
	}
	const keys, each = 40, 3
	var batch []transport.Message
	for seq := range each {
		for k := range keys {
			key := strconv.Itoa(k)
			batch = append(batch, transport.Message{Key: key, Payload: []byte(key + "/" + strconv.Itoa(seq)), Headers: map[string]string{"tenant": "t"}})
		}
	}
	if err := p.PublishBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	r, err := src.Open(ctx, make([]transport.Position, 6))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	next := map[string]int{}
	n := 0
	for deadline := time.Now().Add(10 * time.Second); n < keys*each && time.Now().Before(deadline); {
		ms, err := r.Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			n++
			if want := int(transport.TaskID(m.Key) % 6); m.Shard != want {
				t.Errorf("key %s in shard %d; want %d", m.Key, m.Shard, want)
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
		t.Fatalf("read %d; want %d", n, keys*each)
	}
	if _, err := (func() (*natsjs.Producer, error) {
		s, _ := natsjs.New(js, "BATCH", natsjs.Options{})
		return s.Producer(natsjs.ProducerOptions{})
	})(); err == nil {
		t.Error("a Producer for a Source without Shards and no Subject: no error")
	}
}
