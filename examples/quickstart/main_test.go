package main

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

// The quickstart as the README shows it: two workers share the stream,
// every task handled once, and run returns when its context ends.
func TestQuickstartSharesTheStream(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	var mu sync.Mutex
	seen := map[string]int{}
	h := func(ctx context.Context, m *transport.Message) error {
		mu.Lock()
		seen[m.Key]++
		mu.Unlock()
		return handle(ctx, m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	for range 2 {
		go func() { done <- run(ctx, client, h) }()
	}
	const n = 100
	for i := range n {
		client.XAdd(context.Background(), &redis.XAddArgs{Stream: "tasks", Values: []any{"id", strconv.Itoa(i), "payload", "hello"}})
	}
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		got := len(seen)
		mu.Unlock()
		if got == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if c := seen[strconv.Itoa(i)]; c != 1 {
			t.Errorf("task %d handled %d times; want once", i, c)
		}
	}
}
