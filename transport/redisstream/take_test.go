package redisstream

import (
	"context"
	"slices"
	"testing"

	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A batch that cannot be decoded (an entry ID that is not one) is an
// error, and nothing is skipped: the read positions go back to where the
// batch began and the read ahead, already started past it, is dropped.
func TestUndecodableBatchIsNotSkipped(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	for range 3 {
		c.XAdd(context.Background(), &redis.XAddArgs{Stream: "s", Values: []any{"id", "1", "payload", "p"}})
	}
	s, err := New(c, "s", Options{})
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
	bad := []redis.XStream{{Stream: "s", Messages: []redis.XMessage{{ID: "1-1", Values: map[string]any{"id": "1"}}, {ID: "not-an-id", Values: map[string]any{"id": "2"}}}}}
	if _, err := r.take(bad); err == nil {
		t.Fatal("a batch with an entry ID that is not one was decoded")
	}
	if !slices.Equal(r.args, before) || r.ahead != nil {
		t.Fatalf("after the failed batch the reader reads from %v (read ahead in flight: %v), want %v and none", r.args, r.ahead != nil, before)
	}
	ms, err := r.Fetch(context.Background())
	if err != nil || len(ms) != 3 {
		t.Fatalf("the next fetch: %d entries, %v; want the stream's 3 from its start", len(ms), err)
	}
}
