package kafkadead_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/deadletter/kafkadead"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// A dead task lands in the topic (kfake) with its key, payload, headers,
// the error and its term, and a kafkatopic Source reads it back as a task.
func TestSinkWritesALetterASourceReads(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders-dead"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	addrs := kc.ListenAddrs()
	tr := &kafka.Transport{}
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: "orders-dead", Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer func() { _ = w.Close(); tr.CloseIdleConnections() }()
	ctx := context.Background()
	dctx := consumer.ContextWithAssignment(ctx, partition.Assignment{Index: 1, Replicas: 3, Token: 777})
	m := &transport.Message{Key: "42", Payload: []byte("charge"), Headers: map[string]string{"tenant": "acme"}, Shard: 2, Position: transport.Offset(9)}
	if err := kafkadead.Sink(w)(dctx, m, errors.New("card declined")); err != nil {
		t.Fatal(err)
	}
	src, err := kafkatopic.New(addrs, "orders-dead", kafkatopic.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	r, err := src.Open(ctx, []transport.Position{{}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got *transport.Message
	for deadline := time.Now().Add(10 * time.Second); got == nil && time.Now().Before(deadline); {
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		ms, _ := r.Fetch(fctx)
		cancel()
		if len(ms) > 0 {
			got = ms[0]
		}
	}
	if got == nil {
		t.Fatal("the letter was not read back")
	}
	h := got.Headers
	if got.Key != "42" || string(got.Payload) != "charge" || h["tenant"] != "acme" || h["Nandi-Error"] != "card declined" ||
		h["Nandi-Token"] != "777" || h["Nandi-Index"] != "1" || h["Nandi-Shard"] != "2" || h["Nandi-Position"] != "9" {
		t.Errorf("the letter read back: key %q, payload %q, headers %v", got.Key, got.Payload, h)
	}
}
