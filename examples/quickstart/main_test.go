package main

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/deadletter"
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
	var logs logBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	for range 2 {
		go func() { done <- run(ctx, client, h, logger) }()
	}
	const n = 100
	for i := range n {
		client.XAdd(context.Background(), &redis.XAddArgs{Stream: "tasks", Values: []any{"id", strconv.Itoa(i), "payload", "hello"}})
	}
	// An entry without an id is not dropped: it is dead-lettered, and said.
	client.XAdd(context.Background(), &redis.XAddArgs{Stream: "tasks", Values: []any{"payload", "no id"}})
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
	for time.Now().Before(deadline) && client.XLen(context.Background(), deadletter.Stream("quickstart")).Val() == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"waiting for a lease", "msg=serving", "task dead-lettered"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the quickstart's log lacks %q (its header promises it):\n%s", want, logs.String())
		}
	}
	if n := client.XLen(context.Background(), deadletter.Stream("quickstart")).Val(); n != 1 {
		t.Errorf("%d dead letters; want the entry without an id", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if c := seen[strconv.Itoa(i)]; c != 1 {
			t.Errorf("task %d handled %d times; want once", i, c)
		}
	}
}

// logBuffer is a bytes.Buffer safe for the workers' loggers and the test.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
