package deadletter_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/deadletter"
	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

// A consumer gives up on a task: its letter lands in the group's
// dead-letter stream, where List (nandi dead list) reads it.
func Example() {
	mr := miniredis.NewMiniRedis() // any Redis
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	opts := consumer.Options{MaxAttempts: 5, DeadLetter: deadletter.RedisStream(rdb, deadletter.Stream("payments"), deadletter.Options{Limit: 100_000})}
	// what the consumer does after the fifth failure:
	m := &transport.Message{Key: "42", Payload: []byte("charge 10 EUR")}
	if err := opts.DeadLetter(ctx, m, errors.New("card declined")); err != nil {
		panic(err)
	}
	ls, err := deadletter.List(ctx, rdb, deadletter.Stream("payments"), "-", "+", 10)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: %s: %s\n", ls[0].Key, ls[0].Payload, ls[0].Error)
	// Output: 42: charge 10 EUR: card declined
}
