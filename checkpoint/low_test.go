package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/transport"
	"pgregory.net/rapid"
)

// The store keeps each shard's low watermark incrementally (a sorted set
// of the Lows that count, and a count of the indexes that count and have
// no mark yet), so that no script works through replicas x shards. Under
// any sequence of opens (mapping changes, an aligned log growing shards),
// writes and realigns, on a real redis-server, it is exactly the rule:
// the lowest Low of the indexes that read the shard (Epoch.Reads), every
// mark read whole.
func TestLowWatermarkFollowsTheRule(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	runs := 0
	rapid.Check(t, func(rt *rapid.T) {
		runs++
		l := NewRedis(c, fmt.Sprintf("low-%d", runs))
		aligned := rapid.Bool().Draw(rt, "aligned")
		shards := rapid.IntRange(1, 6).Draw(rt, "shards")
		r := rapid.IntRange(1, 5).Draw(rt, "r")
		token := int64(1)
		ends := func(n int) []transport.Position {
			out := make([]transport.Position, n)
			for s := range out {
				out[s] = transport.Offset(uint64(rapid.IntRange(0, 60).Draw(rt, "end")))
			}
			return out
		}
		var st *State
		open := func(k int) {
			origin := make([]transport.Position, shards)
			var err error
			st, err = l.Open(ctx, OpenRequest{Replicas: r, Index: k, Token: token, Origin: origin, Ends: ends(shards), Aligned: aligned})
			if err != nil {
				rt.Fatalf("open %d of %d over %d shards: %v", k, r, shards, err)
			}
		}
		open(0)
		for range rapid.IntRange(1, 30).Draw(rt, "steps") {
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0: // a mapping change
				r = rapid.IntRange(1, 5).Draw(rt, "r")
				token++
				open(rapid.IntRange(0, r-1).Draw(rt, "k"))
			case 1: // the log grows
				shards += rapid.IntRange(1, 4).Draw(rt, "more")
				open(rapid.IntRange(0, r-1).Draw(rt, "k"))
			case 2: // a misplaced task
				cur := st.Current
				err := l.Realign(ctx, RealignRequest{Epoch: cur.N, Replicas: r, Token: token, Late: rapid.Bool().Draw(rt, "late"), Ends: ends(len(cur.Start))})
				if err != nil && cur.Aligned > 0 && !errors.Is(err, ErrWait) { // ErrWait: nothing written
					rt.Fatalf("realign: %v", err)
				}
				open(rapid.IntRange(0, r-1).Draw(rt, "k"))
			default: // an index writes (its Low only goes up)
				k := rapid.IntRange(0, r-1).Draw(rt, "k")
				open(k)
				cur := st.Current
				marks := map[int]Mark{}
				for s := range cur.Start {
					if rapid.Bool().Draw(rt, "write") {
						low := cur.At(s, k)
						low.Lo += uint64(rapid.IntRange(0, 30).Draw(rt, "step"))
						marks[s] = Mark{Low: low, High: low}
					}
				}
				if err := l.Write(ctx, WriteRequest{Epoch: cur.N, Token: token, Index: k, Replicas: r, Marks: marks}); err != nil {
					rt.Fatalf("write: %v", err)
				}
			}
			low, err := l.ReadLow(ctx)
			if err != nil {
				rt.Fatal(err)
			}
			all, err := l.Read(ctx)
			if err != nil {
				rt.Fatal(err)
			}
			e := all.Current
			e.lows = nil // the rule, from every mark
			for s := range e.Start {
				if got, want := low.Current.Low(s), e.Low(s); got != want {
					rt.Fatalf("epoch %d (%d replicas, aligned %d, cuts %v): shard %d's low watermark is %v; the rule says %v (marks %v, starts %v)",
						e.N, e.R, e.Aligned, e.Cut, s, got, want, e.Marks, e.Start)
				}
			}
		}
	})
}
