package watermillfilter_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/watermillfilter"
	"github.com/redis/go-redis/v9"
)

// An existing Watermill handler under a lease: the Filter middleware lets
// it run only for the messages whose id ("id" metadata) the lease owns.
// Alone in its group, this router owns them all; start more with the same
// lease name and each message is handled by one of them.
func Example() {
	mr := miniredis.NewMiniRedis() // here miniredis; any Redis: a server, Sentinel or Cluster
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	lease, err := partition.New(rdb, partition.Options{Name: "webhooks", Interval: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	go func() { _ = lease.Run(ctx) }()
	for _, ok := lease.Current(); !ok; _, ok = lease.Current() {
		time.Sleep(10 * time.Millisecond) // a new worker's first lease: two intervals
	}

	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		panic(err)
	}
	router.AddMiddleware(watermillfilter.New(lease, watermillfilter.Options{}).Middleware)
	sent := make(chan string, 3)
	router.AddConsumerHandler("send-webhook", "webhooks", pubSub, func(m *message.Message) error {
		sent <- m.Metadata.Get("id") + ": " + string(m.Payload) // the effect; nil once it is done
		return nil
	})
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	for i := range 3 {
		m := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, "event %d", i))
		m.Metadata.Set("id", fmt.Sprint(7+i))
		if err := pubSub.Publish("webhooks", m); err != nil {
			panic(err)
		}
	}
	var got []string
	for range 3 {
		got = append(got, <-sent)
	}
	slices.Sort(got)
	for _, s := range got {
		fmt.Println(s)
	}
	// Output:
	// 7: event 0
	// 8: event 1
	// 9: event 2
}
