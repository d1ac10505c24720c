package jsdead_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nandi-go/nandi/deadletter"
	"github.com/nandi-go/nandi/deadletter/jsdead"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/natsjs"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Dead letters into a JetStream stream (here an embedded nats-server):
// consumer.Options{DeadLetter: jsdead.Sink(js, subject)}. A natsjs
// Source reads the stream as tasks again, each with what the letter says
// in Nandi- headers.
func Example() {
	store := tempDir()
	defer os.RemoveAll(store)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: store, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		panic("nats-server not ready")
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"orders.dead"}}); err != nil {
		panic(err)
	}
	dead := jsdead.Sink(js, "orders.dead") // the consumer calls it with the task it gives up on

	task := &transport.Message{Key: "42", Payload: []byte(`{"order": 42}`), Headers: map[string]string{"tenant": "acme"}}
	if err := dead(ctx, task, errors.New("card declined")); err != nil {
		panic(err)
	}

	src, err := natsjs.New(js, "DEAD", natsjs.Options{})
	if err != nil {
		panic(err)
	}
	r, err := src.Open(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer r.Close()
	ms, err := r.Fetch(ctx)
	if err != nil {
		panic(err)
	}
	m := ms[0]
	fmt.Printf("key %s, payload %s, tenant %s\n", m.Key, m.Payload, m.Headers["tenant"])
	fmt.Println(deadletter.Header(deadletter.FieldError)+":", m.Headers[deadletter.Header(deadletter.FieldError)])
	// Output:
	// key 42, payload {"order": 42}, tenant acme
	// Nandi-Error: card declined
}

// tempDir is the embedded server's store.
func tempDir() string {
	d, err := os.MkdirTemp("", "jsdead-example")
	if err != nil {
		panic(err)
	}
	return d
}
