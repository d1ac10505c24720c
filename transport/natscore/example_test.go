package natscore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/natscore"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
)

// A worker of the group "webhooks" handles the messages of the subject
// "hooks" it owns, the task id in the "id" header. Core NATS keeps
// nothing: what is published while no worker owns its index (before the
// first lease, or for about an interval at a change of membership) is
// lost and counted, so this example publishes once the worker serves.
func Example() {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	go ns.Start() // here an embedded nats-server; any NATS
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		panic("nats-server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()

	mr := miniredis.NewMiniRedis() // any Redis: a server, Sentinel or Cluster
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	lease, err := partition.New(rdb, partition.Options{Name: "webhooks", Interval: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	src, err := natscore.New(nc, "hooks", natscore.Options{})
	if err != nil {
		panic(err)
	}
	got := make(chan string)
	handle := func(ctx context.Context, m *transport.Message) error {
		got <- string(m.Payload) // ctx ends with the lease: honour it
		return nil
	}
	c, err := consumer.New(lease, src, handle, consumer.Options{Concurrency: 8})
	if err != nil {
		panic(err)
	}
	run, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(run) }()
	for c.Stats().Terms == 0 { // the worker holds its share and is subscribed
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 3 {
		m := nats.NewMsg("hooks")
		m.Header.Set("id", "42")
		m.Data = fmt.Appendf(nil, "hook %d for customer 42", i)
		if err := nc.PublishMsg(m); err != nil {
			panic(err)
		}
	}
	for range 3 {
		fmt.Println(<-got)
	}
	stop() // as on SIGTERM: stop taking, finish, leave
	fmt.Println("stopped:", <-done)
	// Output:
	// hook 0 for customer 42
	// hook 1 for customer 42
	// hook 2 for customer 42
	// stopped: <nil>
}
