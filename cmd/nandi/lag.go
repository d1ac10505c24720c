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
	// Entries from the low watermark on (-1: unknown); for a Redis stream,
	// counted up to lagCountCap (AtLeast then set); for Kafka and
	// JetStream, offsets, as the workers last saw the log's end.
	Entries int64 `json:"entries"`
	AtLeast bool  `json:"at_least,omitempty"`
	// AgeSeconds: the time between the low watermark's entry and the
	// newest (Redis stream IDs; -1 where unknown).
	AgeSeconds float64 `json:"age_seconds"`
}

// lagCountCap bounds the entries nandi counts behind a Redis stream's
// watermark: counting is O(entries) in Redis, and past this many the
// number is "at least".
const lagCountCap = 100_000

// countAfter counts a stream's entries from an ID on (at most ARGV[2]):
// a low watermark is the first position not done, an entry's own (the
// first unfinished one) or one past the last done. It returns the newest
// entry's ID too.
var countAfter = redis.NewScript(`
local xs = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', tonumber(ARGV[2]))
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local id = ''
if #last > 0 then id = last[1][1] end
return {#xs, id}`)

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
	for _, w := range workers {
		if w.System != "" {
			system, sources = w.System, w.Sources
			break
		}
	}
	if system == "" {
		return nil, nil
	}
	out := make([]ShardLag, len(st.Current.Start))
	for s := range out {
		l := ShardLag{Shard: s, Entries: -1, AgeSeconds: -1}
		switch {
		case s < len(sources):
			l.Source = sources[s]
		case len(sources) == 1:
			l.Source = sources[0]
		}
		low := st.Current.Low(s)
		if system == "redis" && len(sources) == len(out) {
			res, err := countAfter.Run(ctx, c, []string{sources[s]}, redisID(low), lagCountCap).Slice()
			if err != nil {
				return nil, fmt.Errorf("counting the entries of %s behind the group: %w", sources[s], err)
			}
			n, _ := res[0].(int64)
			l.Entries, l.AtLeast, l.AgeSeconds = n, n >= lagCountCap, 0
			if last, err := transport.ParsePosition(fmt.Sprint(res[1])); err == nil && n > 0 && last.Hi > low.Hi {
				l.AgeSeconds = float64(last.Hi-low.Hi) / 1000
			}
		} else {
			for _, w := range workers {
				if s < len(w.LagMessages) && w.LagMessages[s] > l.Entries {
					l.Entries = w.LagMessages[s]
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
	if l.Entries >= 0 {
		entries = strconv.FormatInt(l.Entries, 10)
		if l.AtLeast {
			entries = ">=" + entries
		}
	}
	if l.AgeSeconds < 0 {
		return entries
	}
	return fmt.Sprintf("%s (%.1fs)", entries, l.AgeSeconds)
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
