package natscore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nandi-go/nandi/internal/natstest"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/natscore"
	"github.com/nandi-go/nandi/transport/transporttest"
)

// The conformance suite over shard subjects a Producer published to (on
// a connection of its own), and its refusals.
func TestConformanceThroughProducer(t *testing.T) {
	srv := natstest.Start(t)
	sub, pub := srv.Conn(), srv.Conn()
	transporttest.Run(t, transporttest.Harness{New: func(t *testing.T) (transport.Source, func(string, []byte)) {
		prefix := fmt.Sprintf("produced.%d", subjects.Add(1))
		src, err := natscore.New(sub, prefix, natscore.Options{Shards: 4})
		if err != nil {
			t.Fatal(err)
		}
		p, err := src.Producer(natscore.ProducerOptions{Conn: pub})
		if err != nil {
			t.Fatal(err)
		}
		return src, func(k string, payload []byte) {
			if err := p.PublishBatch(context.Background(), []transport.Message{{Key: k, Payload: payload}}); err != nil {
				t.Fatal(err)
			}
		}
	}})
	src, err := natscore.New(sub, "refused", natscore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := src.Producer(natscore.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]transport.Message{{{Key: ""}}, {{Key: "a", Headers: map[string]string{"id": "b"}}}} {
		if err := p.PublishBatch(context.Background(), bad); !errors.Is(err, transport.ErrInvalidTask) {
			t.Errorf("PublishBatch(%v) = %v; want ErrInvalidTask", bad, err)
		}
	}
}
