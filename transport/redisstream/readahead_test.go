package redisstream_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/redis/go-redis/v9"
)

// The reader reads one batch ahead. Entries arriving while it reads, in
// bursts, read in batches of 7, with fetches that give up early (a short deadline, while
// a read ahead is in flight) and fetches that wait: every entry comes
// once, in order. Closing with a read ahead in flight ends its goroutine
// (TestMain checks that none is left).
func TestReadAheadSkipsNothing(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	const n = 1000
	src, err := redisstream.New(c, "ahead", redisstream.Options{Count: 7, Block: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r, err := src.Open(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := range n {
			if i%50 == 0 {
				time.Sleep(5 * time.Millisecond) // reads ahead wait for the next burst
			}
			c.XAdd(context.Background(), &redis.XAddArgs{Stream: "ahead", Values: []any{"id", i, "payload", "p"}})
		}
	}()
	var got []int
	fetches, gaveUp := 0, 0
	for len(got) < n {
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if fetches++; fetches%2 == 0 {
			ctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
		}
		ms, err := r.Fetch(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			gaveUp++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			k, _ := strconv.Atoi(m.Key)
			if k != len(got) {
				t.Fatalf("entry %d came after %d entries: the read ahead skipped or repeated some", k, len(got))
			}
			got = append(got, k)
		}
	}
	<-produced
	if gaveUp == 0 {
		t.Fatal("no fetch gave up early: the test did not test that")
	}
	c.XAdd(context.Background(), &redis.XAddArgs{Stream: "ahead", Values: []any{"id", n, "payload", "p"}})
	if _, err := r.Fetch(context.Background()); err != nil { // starts a read ahead that blocks
		t.Fatal(err)
	}
	r.Close()
	if _, err := r.Fetch(context.Background()); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Fetch after Close: %v, want ErrClosed", err)
	}
}
