package jsdead_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/deadletter/jsdead"
	"github.com/nandi-go/nandi/internal/natstest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/natsjs"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A dead task lands on the subject with its key, payload, headers, the
// error and its term, and a natsjs Source reads it back as a task.
func TestSinkPublishesALetterASourceReads(t *testing.T) {
	srv := natstest.Start(t)
	js, err := jetstream.New(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"orders.dead"}}); err != nil {
		t.Fatal(err)
	}
	sink := jsdead.Sink(js, "orders.dead")
	dctx := consumer.ContextWithAssignment(ctx, partition.Assignment{Index: 1, Replicas: 3, Token: 777})
	m := &transport.Message{Key: "42", Payload: []byte("charge"), Headers: map[string]string{"tenant": "acme"}, Shard: 2, Position: transport.Offset(9)}
	if err := sink(dctx, m, errors.New("card declined")); err != nil {
		t.Fatal(err)
	}
	src, err := natsjs.New(js, "DEAD", natsjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := src.Open(ctx, []transport.Position{{}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ms, err := r.Fetch(fctx)
	if err != nil || len(ms) != 1 {
		t.Fatalf("Fetch: %d messages, %v", len(ms), err)
	}
	got := ms[0]
	h := got.Headers
	if got.Key != "42" || string(got.Payload) != "charge" || h["tenant"] != "acme" || h["Nandi-Error"] != "card declined" ||
		h["Nandi-Token"] != "777" || h["Nandi-Index"] != "1" || h["Nandi-Shard"] != "2" || h["Nandi-Position"] != "9" {
		t.Errorf("the letter read back: key %q, payload %q, headers %v", got.Key, got.Payload, h)
	}
}
