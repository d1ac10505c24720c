package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// countEntries counts across chunks, from an ID included up to an ID
// excluded, and stops at lagCountCap ("at least"), with no script call
// blocking Redis for long (SLOWLOG: none over 50 ms, where one call
// counting 100,000 entries took 30-180 ms).
func TestCountEntriesInChunks(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	const n = lagCountCap + 500
	var ids []string
	for i := 0; i < n; i += 5000 {
		p := c.Pipeline()
		var cmds []*redis.StringCmd
		for j := i; j < min(i+5000, n); j++ {
			cmds = append(cmds, p.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []any{"id", j}}))
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range cmds {
			ids = append(ids, cmd.Val())
		}
	}
	c.Do(ctx, "CONFIG", "SET", "slowlog-log-slower-than", "50000")
	c.Do(ctx, "SLOWLOG", "RESET")
	for _, tc := range []struct {
		from, until string
		want        int64
		atLeast     bool
	}{
		{"0-0", "+", lagCountCap, true},
		{ids[n-4500], "+", 4500, false},                                      // more than two chunks, the first included
		{ids[10], "(" + ids[10+2*countChunkSize], 2 * countChunkSize, false}, // exactly two chunks, the end excluded
		{ids[10], "(" + ids[10], 0, false},
	} {
		got, atLeast, err := countEntries(ctx, c, "s", tc.from, tc.until)
		if err != nil || got != tc.want || atLeast != tc.atLeast {
			t.Errorf("countEntries(%s, %s) = %d, at least %v, %v; want %d, %v", tc.from, tc.until, got, atLeast, err, tc.want, tc.atLeast)
		}
	}
	slow, err := c.Do(ctx, "SLOWLOG", "GET", "-1").Slice()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range slow {
		if f, ok := e.([]any); ok && len(f) > 3 && strings.Contains(fmt.Sprint(f[3]), "evalsha") {
			t.Errorf("a count call blocked Redis for %v µs: %v", f[2], f[3])
		}
	}
}
