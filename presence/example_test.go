package presence_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/presence"
	"github.com/redis/go-redis/v9"
)

// What nandi status and nandi web read: every live worker's record, the
// holders first by index. A consumer writes its own once per interval;
// here two are written by hand.
func Example() {
	mr := miniredis.NewMiniRedis() // here miniredis; any Redis
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	ttl := presence.TTLIntervals * 10 * time.Second
	_ = presence.Write(ctx, rdb, "mail-sender", &presence.Record{Worker: "pod-b:1", Held: true, Index: 1, Replicas: 2, Handled: 40}, ttl)
	_ = presence.Write(ctx, rdb, "mail-sender", &presence.Record{Worker: "pod-a:1", Held: true, Index: 0, Replicas: 2, Handled: 52}, ttl)
	_ = presence.Write(ctx, rdb, "mail-sender", &presence.Record{Worker: "pod-c:1", LastError: "joining"}, ttl)

	workers, err := presence.Read(ctx, rdb, "mail-sender")
	if err != nil {
		panic(err)
	}
	for _, w := range workers {
		if w.Held {
			fmt.Printf("%s holds %d of %d, %d handled\n", w.Worker, w.Index, w.Replicas, w.Handled)
		} else {
			fmt.Printf("%s holds nothing: %s\n", w.Worker, w.LastError)
		}
	}
	// Output:
	// pod-a:1 holds 0 of 2, 52 handled
	// pod-b:1 holds 1 of 2, 40 handled
	// pod-c:1 holds nothing: joining
}
