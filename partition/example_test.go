package partition_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/partition"
	"github.com/redis/go-redis/v9"
)

// A worker joins its group, waits for its first lease and handles the
// tasks it owns while it holds it.
func Example() {
	mr := miniredis.NewMiniRedis() // any Redis: a server, Sentinel or Cluster
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()

	lease, err := partition.New(client, partition.Options{Name: "mail-sender", Interval: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- lease.Run(ctx) }()

	term, err := lease.Next(ctx) // about two intervals for a new worker
	if err != nil {
		panic(err)
	}
	a := term.Assignment()
	fmt.Printf("holding index %d of %d\n", a.Index, a.Replicas)
	for id := uint64(1); id <= 3; id++ {
		if a, ok := lease.Current(); ok && a.Owns(id) {
			fmt.Println("handling task", id)
		}
	}

	cancel()
	fmt.Println("Run:", <-done)
	<-term.Done()
	fmt.Println("term ended:", term.Err())
	// Output:
	// holding index 0 of 1
	// handling task 1
	// handling task 2
	// handling task 3
	// Run: <nil>
	// term ended: partition: lease stopped
}
