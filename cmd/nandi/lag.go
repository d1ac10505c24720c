package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/presence"
	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

// ShardLag is how far the group is behind one shard's end: from its low
// watermark (the current epoch's lowest checkpoint of the shard) to the
// newest entry.
type ShardLag struct {
	Shard  int    `json:"shard"`
	Source string `json:"source,omitempty"` // its stream, topic or subject
	// Entries from the low watermark on (nil, null in JSON: unknown); for
	// a Redis stream, counted up to lagCountCap (AtLeast then set); for
	// Kafka and JetStream, offsets, as the workers last saw the log's end.
	Entries *int64 `json:"entries"`
	AtLeast bool   `json:"at_least,omitempty"`
	// AgeSeconds: the time between the low watermark's entry and the
	// newest (Redis stream IDs; nil, null in JSON, where unknown).
	AgeSeconds *float64 `json:"age_seconds"`
}

// lagCountCap bounds the entries nandi counts in a Redis stream (lag, a
// reset's dry run): past this many the number is "at least".
const lagCountCap = 100_000

// countChunkSize is the most entries one script call counts: a call of
// 2,000 blocks Redis for about 3 ms, where one of 100,000 blocked it for
// 30-180 ms (SLOWLOG, this machine).
const countChunkSize = 2000

// countChunk counts a stream's entries between XRANGE's bounds ARGV[1]
// and ARGV[2] (a leading "(" excludes), at most ARGV[3], and returns the
// last one's ID, where the next chunk starts after.
var countChunk = redis.NewScript(`
local xs = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[2], 'COUNT', tonumber(ARGV[3]))
local last = ''
if #xs > 0 then last = xs[#xs][1] end
return {#xs, last}`)

// countEntries counts stream's entries from the ID from (included) up to
// until (XRANGE's end: "+", or "(" and an ID to exclude it), at most
// lagCountCap, a chunk per script call. A low watermark is the first
// position not done (an entry's own, the first unfinished one, or one past
// the last done): counted from there, included.
func countEntries(ctx context.Context, c redis.UniversalClient, stream, from, until string) (n int64, atLeast bool, err error) {
	start := from
	for n < lagCountCap {
		want := min(countChunkSize, lagCountCap-n)
		res, err := countChunk.Run(ctx, c, []string{stream}, start, until, want).Slice()
		if err != nil {
			return 0, false, fmt.Errorf("counting the entries of %s: %w", stream, err)
		}
		got, _ := res[0].(int64)
		n += got
		if got < want {
			return n, false, nil
		}
		start = "(" + fmt.Sprint(res[1])
	}
	return n, true, nil
}

// readLag returns the group's lag per shard of its current epoch: a Redis
// stream's entries counted here, other logs' from the workers' presence
// records. Nil when the group has no checkpoints (no log) or no running
// worker names its source.
func readLag(ctx context.Context, c redis.UniversalClient, st *checkpoint.State, workers []presence.Record) ([]ShardLag, error) {
	if st == nil || st.Current == nil {
		return nil, nil
	}
	var system string
	var sources []string
	for _, w := range workers { // Sources: in index 0's holder's record
		if system == "" {
			system = w.System
		}
		if sources == nil {
			sources = w.Sources
		}
	}
	if system == "" {
		return nil, nil
	}
	out := make([]ShardLag, len(st.Current.Start))
	for s := range out {
		l := ShardLag{Shard: s}
		switch {
		case s < len(sources):
			l.Source = sources[s]
		case len(sources) == 1:
			l.Source = sources[0]
		}
		low := st.Current.Low(s)
		if system == "redis" && len(sources) == len(out) {
			n, atLeast, err := countEntries(ctx, c, sources[s], redisID(low), "+")
			if err != nil {
				return nil, err
			}
			age := 0.0
			l.Entries, l.AtLeast, l.AgeSeconds = &n, atLeast, &age
			newest, err := c.XRevRangeN(ctx, sources[s], "+", "-", 1).Result()
			if err != nil {
				return nil, fmt.Errorf("reading the newest entry of %s: %w", sources[s], err)
			}
			if len(newest) > 0 && n > 0 {
				if last, err := transport.ParsePosition(newest[0].ID); err == nil && last.Hi > low.Hi {
					age = float64(last.Hi-low.Hi) / 1000
				}
			}
		} else {
			for _, w := range workers {
				if s < len(w.LagMessages) && w.LagMessages[s] != nil && (l.Entries == nil || *w.LagMessages[s] > *l.Entries) {
					n := *w.LagMessages[s]
					l.Entries = &n
				}
			}
		}
		out[s] = l
	}
	return out, nil
}

// redisID is a position as a Redis stream entry ID.
func redisID(p transport.Position) string {
	return strconv.FormatUint(p.Hi, 10) + "-" + strconv.FormatUint(p.Lo, 10)
}

// shardLagText says a shard's lag in a table cell.
func shardLagText(l ShardLag) string {
	entries := "?"
	if l.Entries != nil {
		entries = strconv.FormatInt(*l.Entries, 10)
		if l.AtLeast {
			entries = ">=" + entries
		}
	}
	if l.AgeSeconds == nil {
		return entries
	}
	return fmt.Sprintf("%s (%.1fs)", entries, *l.AgeSeconds)
}

// printLag prints the group's lag per shard.
func printLag(w io.Writer, s *Status) {
	if len(s.Lag) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tSOURCE\tBEHIND (ENTRIES, AGE)")
	for _, l := range s.Lag {
		fmt.Fprintf(tw, "%d\t%s\t%s\n", l.Shard, clean(l.Source), shardLagText(l))
	}
	tw.Flush()
}
