package redisstream_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/redis/go-redis/v9"
)

// backlogByCount is what Backlog must answer: the entries of the stream at
// or after from, counted one by one.
func backlogByCount(t *testing.T, c *redis.Client, stream string, from transport.Position) int64 {
	t.Helper()
	start := "-"
	if (from != transport.Position{}) {
		start = fmt.Sprintf("%d-%d", from.Hi, from.Lo)
	}
	xs, err := c.XRange(context.Background(), stream, start, "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(xs))
}

// Backlog equals a count of the entries at or after a position through a
// random walk of what happens to a stream: entries added (past a count's
// chunk), positions that move forward and back (several groups), trims
// (MINID, MAXLEN) and XDELs anywhere, and a stream deleted and made anew.
// Each answer is checked against XRANGE's count; a second Source (no
// marks) against the first.
func TestBacklogIsTheCountOfEntriesAfterAPosition(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	src, err := redisstream.NewSharded(c, []string{"b0", "b1"}, redisstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var ids [2][]string // every ID ever added, per stream
	add := func(s, n int) {
		pipe := c.Pipeline()
		for range n {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: fmt.Sprintf("b%d", s), Values: []any{"id", "k", "payload", "x"}})
		}
		cmds, err := pipe.Exec(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range cmds {
			ids[s] = append(ids[s], cmd.(*redis.StringCmd).Val())
		}
	}
	pos := func(id string) transport.Position {
		p, err := transport.ParsePosition(id)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	add(0, 5000)
	add(1, 10)
	for step := range 300 {
		s := rng.IntN(2)
		stream := fmt.Sprintf("b%d", s)
		switch op := rng.IntN(20); {
		case op < 6:
			add(s, rng.IntN(3000))
		case op == 6 && len(ids[s]) > 0:
			c.XTrimMinID(ctx, stream, ids[s][rng.IntN(len(ids[s]))])
		case op == 7:
			c.XTrimMaxLen(ctx, stream, int64(rng.IntN(4000)))
		case op == 8 && len(ids[s]) > 0:
			c.XDel(ctx, stream, ids[s][rng.IntN(len(ids[s]))])
		case op == 9 && step%50 == 9:
			c.Del(ctx, stream)
			ids[s] = nil
		}
		from := make([]transport.Position, 2)
		for i := range from {
			switch {
			case len(ids[i]) == 0 || rng.IntN(10) == 0:
			case rng.IntN(3) == 0: // one past the end
				from[i] = pos(ids[i][len(ids[i])-1]).Next()
			default: // a group near the end, or one far behind
				from[i] = pos(ids[i][max(0, len(ids[i])-1-rng.IntN(1+rng.IntN(len(ids[i]))))])
			}
		}
		got, err := src.Backlog(ctx, from)
		if err != nil {
			t.Fatal(err)
		}
		for i := range from {
			if want := backlogByCount(t, c, fmt.Sprintf("b%d", i), from[i]); got[i] != want {
				t.Fatalf("step %d: the backlog of b%d from %v is %d; counted, %d", step, i, from[i], got[i], want)
			}
		}
	}
}

// With Options.Group the consumer group follows the nandi group's
// watermark with its entries-read: XINFO GROUPS' lag is the count of
// entries after it, with the group running and after it stopped, Trim on
// or off (KEDA's redis-streams scaler reads that lag).
func TestTheMirroredGroupsLagIsTheBacklog(t *testing.T) {
	for _, trim := range []bool{false, true} {
		t.Run(fmt.Sprintf("Trim=%v", trim), func(t *testing.T) {
			srv := redistest.Start(t)
			c := srv.Client()
			ctx := context.Background()
			stream := "orders"
			for i := range 3000 {
				c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"id", i, "payload", "x"}})
			}
			src, _ := redisstream.New(c, stream, redisstream.Options{Group: "nandi", Trim: trim})
			cs, handled, stop := runConsumer(t, c, "mirror", src)
			redistest.WaitFor(t, 20*time.Second, "the 3,000 handled", func() bool { return handled.Load() == 3000 })
			lagIs := func(what string, want int64) {
				t.Helper()
				redistest.WaitFor(t, 10*time.Second, what, func() bool {
					gs, err := c.XInfoGroups(ctx, stream).Result()
					if err != nil {
						return false
					}
					for _, g := range gs {
						if g.Name == "nandi" && g.Lag == want && g.EntriesRead > 0 {
							return true
						}
					}
					return false
				})
			}
			lagIs("XINFO GROUPS lag 0 once every entry is done", 0)
			stop()
			_ = cs
			for i := range 700 {
				c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"id", i, "payload", "x"}})
			}
			lagIs("XINFO GROUPS lag 700 with no worker running", 700)
			_, handled, stop = runConsumer(t, c, "mirror", src)
			defer stop()
			redistest.WaitFor(t, 20*time.Second, "the 700 handled", func() bool { return handled.Load() == 700 })
			lagIs("XINFO GROUPS lag 0 again", 0)
		})
	}
}

// xrangeCalls is how many XRANGEs the server has run (scripts' included).
func xrangeCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "cmdstat_xrange:") {
			fmt.Sscanf(strings.TrimPrefix(line, "cmdstat_xrange:"), "calls=%d", &n)
		}
	}
	return n
}

// A backlog is counted once, when its position is first seen; from then
// on a reading counts only the entries the group finished since the last
// one: at 48 shards with 5,000 entries behind each, a second reading at
// the same positions reads no entry, and one after 10 more entries per
// shard were done reads those (one XRANGE per shard), not the backlog.
func TestBacklogReadsNoEntryOnceItsPositionIsKnown(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	names := make([]string, 48)
	from := make([]transport.Position, 48)
	for i := range names {
		names[i] = fmt.Sprintf("s%d", i)
		pipe := c.Pipeline()
		for range 5100 {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: names[i], Values: []any{"id", "k", "payload", "x"}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		xs, _ := c.XRangeN(ctx, names[i], "-", "+", 101).Result()
		from[i], _ = transport.ParsePosition(xs[100].ID)
	}
	src, _ := redisstream.NewSharded(c, names, redisstream.Options{})
	var got []int64
	backlog := func(want int64) {
		t.Helper()
		var err error
		if got, err = src.Backlog(ctx, from); err != nil {
			t.Fatal(err)
		}
		for i, n := range got {
			if n != want {
				t.Fatalf("shard %d: a backlog of %d; want %d", i, n, want)
			}
		}
	}
	backlog(5000)
	before := xrangeCalls(t, c)
	backlog(5000)
	if n := xrangeCalls(t, c) - before; n != 0 {
		t.Errorf("a second reading at the same positions ran %d XRANGEs; want 0", n)
	}
	for i := range from {
		xs, _ := c.XRangeN(ctx, names[i], "-", "+", 111).Result()
		from[i], _ = transport.ParsePosition(xs[110].ID)
	}
	before = xrangeCalls(t, c)
	backlog(4990)
	if n := xrangeCalls(t, c) - before; n > 48 {
		t.Errorf("a reading after 10 entries per shard were done ran %d XRANGEs; want one per shard (48)", n)
	}
}
