package kafkadead_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nandi-go/nandi/deadletter"
	"github.com/nandi-go/nandi/deadletter/kafkadead"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Dead letters into a Kafka topic (here kfake, an in-process Kafka
// protocol peer): consumer.Options{DeadLetter: kafkadead.Sink(w)}. A
// kafkatopic Source reads the topic as tasks again, each with what the
// letter says in Nandi- headers.
func Example() {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders-dead"))
	if err != nil {
		panic(err)
	}
	defer kc.Close()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(kc.ListenAddrs()...), Topic: "orders-dead", Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	dead := kafkadead.Sink(w) // the consumer calls it with the task it gives up on

	task := &transport.Message{Key: "42", Payload: []byte(`{"order": 42}`), Headers: map[string]string{"tenant": "acme"}}
	if err := dead(context.Background(), task, errors.New("card declined")); err != nil {
		panic(err)
	}

	src, err := kafkatopic.New(kc.ListenAddrs(), "orders-dead", kafkatopic.Options{})
	if err != nil {
		panic(err)
	}
	defer src.Close()
	r, err := src.Open(context.Background(), nil)
	if err != nil {
		panic(err)
	}
	defer r.Close()
	ms, err := r.Fetch(context.Background())
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
