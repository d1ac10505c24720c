package natsjs_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/natsjs"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

// A worker of the group "mail-sender" sends the mails of the JetStream
// stream "OUTBOX" it owns, the task id in the "id" header; run more with
// the same group name and they split it. The lease and the checkpoints
// live in Redis.
func Example() {
	dir, _ := os.MkdirTemp("", "nandi-example")
	defer os.RemoveAll(dir)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	go ns.Start() // here an embedded nats-server; any NATS with JetStream
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		panic("nats-server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUTBOX", Subjects: []string{"outbox.>"}}); err != nil {
		panic(err)
	}
	for i := range 3 {
		m := nats.NewMsg("outbox.mail")
		m.Header.Set("id", "42")
		m.Data = fmt.Appendf(nil, "mail %d to customer 42", i)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			panic(err)
		}
	}

	mr := miniredis.NewMiniRedis() // any Redis: a server, Sentinel or Cluster
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	lease, err := partition.New(rdb, partition.Options{Name: "mail-sender", Interval: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	src, err := natsjs.New(js, "OUTBOX", natsjs.Options{})
	if err != nil {
		panic(err)
	}
	sent := make(chan string)
	send := func(ctx context.Context, m *transport.Message) error {
		sent <- string(m.Payload) // ctx ends with the lease: honour it
		return nil
	}
	c, err := consumer.New(lease, src, send, consumer.Options{Concurrency: 8})
	if err != nil {
		panic(err)
	}
	run, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(run) }()
	for range 3 {
		fmt.Println(<-sent)
	}
	stop() // as on SIGTERM: stop taking, finish, write checkpoints, leave
	fmt.Println("stopped:", <-done)
	// Output:
	// mail 0 to customer 42
	// mail 1 to customer 42
	// mail 2 to customer 42
	// stopped: <nil>
}
