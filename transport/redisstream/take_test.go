package redisstream

import (
	"context"
	"slices"
	"testing"

	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A batch that cannot be decoded (an entry ID that is not one, in the
// second of two streams) is an error, and nothing is skipped: no read
// position moves, not even the first stream's, whose entries decoded.
// The next fetch reads both streams from where they were.
func TestUndecodableBatchIsNotSkipped(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	for _, st := range []string{"s0", "s1"} {
		for range 3 {
			c.XAdd(context.Background(), &redis.XAddArgs{Stream: st, Values: []any{"id", "1", "payload", "p"}})
		}
	}
	s, err := NewSharded(c, []string{"s0", "s1"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := s.Open(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	r := tr.(*reader)
	before := slices.Clone(r.args)
	bad := []redis.XStream{
		{Stream: "s0", Messages: []redis.XMessage{{ID: "1-1", Values: map[string]any{"id": "1"}}}},
		{Stream: "s1", Messages: []redis.XMessage{{ID: "not-an-id", Values: map[string]any{"id": "2"}}}},
	}
	if _, err := r.take(bad); err == nil {
		t.Fatal("a batch with an entry ID that is not one was decoded")
	}
	if !slices.Equal(r.args, before) {
		t.Fatalf("after the failed batch the reader reads from %v, want %v", r.args, before)
	}
	ms, err := r.Fetch(context.Background())
	if err != nil || len(ms) != 6 {
		t.Fatalf("the next fetch: %d entries, %v; want both streams' 3 from their start", len(ms), err)
	}
}
