package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/presence"
	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

// cmdCheckpoint runs nandi checkpoint's subcommands.
func cmdCheckpoint(ctx context.Context, args []string, out, errOut io.Writer) int {
	return subcommand(ctx, "checkpoint", args, out, errOut, map[string]func(context.Context, []string, io.Writer, io.Writer) int{
		"reset": cmdReset,
	})
}

// cmdReset moves a stopped group's checkpoints. -to is start (the log's
// beginning: everything is done again), end (the log's end, with
// -streams: the group's Redis streams, in shard order),
// time:2026-12-04T10:00:00Z (Redis Streams: the first entry at or after
// it), or a position for every shard (1234-0), or one per shard
// (1234-0,987-0). The group must be stopped: every worker, and three
// intervals after the last.
func cmdReset(ctx context.Context, args []string, out, errOut io.Writer) int {
	fs := newFlags("checkpoint reset", out, errOut)
	url := fs.redisURL("the group's Redis: its lease, and its checkpoints unless -checkpoints")
	ledgerURL := fs.String("checkpoints", "", "the Redis of the group's checkpoints, when not the lease's (consumer.Options.Checkpoints), as a URL")
	group := fs.String("group", "", "the group's name (partition.Options.Name)")
	to := fs.String("to", "", "where every index starts again: start, end, time:RFC3339 or positions")
	streams := fs.String("streams", "", "with -to end: the group's Redis streams, comma-separated, in shard order")
	dry := fs.Bool("dry-run", false, "say what would be skipped or done again, with how many entries per shard, and change nothing (also while the group runs)")
	if code, ok := fs.parse(args); !ok {
		return code
	}
	if *group == "" || *to == "" {
		return fs.usageError("-group and -to are required")
	}
	c, code := fs.connected(ctx, *url)
	if c == nil {
		return code
	}
	defer c.Close()
	ledger := c
	if *ledgerURL != "" {
		if ledger, code = fs.connected(ctx, *ledgerURL); ledger == nil {
			return code
		}
		defer ledger.Close()
	}
	err := checkGroup(ctx, ledger, *group)
	if err != nil && ledger != c {
		err = checkGroup(ctx, c, *group)
	}
	if err != nil {
		return fs.failed(err)
	}
	names := *streams
	if names == "" {
		names = strings.Join(sourcesOf(ctx, c, ledger, *group), ",")
	}
	positions, err := resetTarget(ctx, c, *to, names)
	if err != nil {
		return fs.usageError("-to %s: %v (start, end, time:RFC3339, or positions)", *to, oneLine(err.Error()))
	}
	// -redis is where the lease lives: a group with no lease there has
	// been stopped for over ten intervals.
	r, err := checkpoint.NewRedis(ledger, *group).Reset(ctx, positions, checkpoint.ResetOptions{Lease: c, DryRun: *dry})
	if err != nil {
		fmt.Fprintln(errOut, "nandi checkpoint reset:", err) // ErrGroupRunning, ErrNoLedger, or the store's
		return 1
	}
	verb := "reset"
	if r.DryRun {
		verb = "would reset"
	}
	fmt.Fprintf(out, "group %s %s: epoch %d (of %s) replaced by epoch %d, every index starting again at %v\n",
		*group, verb, r.From.N, plural(r.From.R, "replica"), r.N, r.To)
	for _, m := range r.Moves() {
		fmt.Fprintln(out, "  "+m)
	}
	if r.DryRun {
		for s := range r.To {
			fmt.Fprintln(out, "  "+shardMove(ctx, ledger, r, s, strings.Split(names, ",")))
		}
		if r.Running != "" {
			fmt.Fprintf(out, "the group is running: the reset itself is refused until it has stopped (%s)\n", r.Running)
		}
	}
	if !r.DryRun {
		fmt.Fprintln(out, "workers started now read from there; nandi status shows the epoch")
	}
	return 0
}

// sourcesOf returns the group's Redis streams in shard order, as its
// workers recorded them beside the ledger (checkpoint.ReadLog), else as its
// running workers name them (nil when neither says, or its log is not
// Redis streams).
func sourcesOf(ctx context.Context, c, ledger redis.UniversalClient, group string) []string {
	if lg, err := checkpoint.ReadLog(ctx, ledger, group); err == nil && lg != nil {
		if lg.System == "redis" {
			return lg.Sources
		}
		return nil
	}
	ws, err := presence.Read(ctx, c, group)
	if err != nil {
		return nil
	}
	for _, w := range ws {
		if w.System == "redis" && len(w.Sources) > 0 { // index 0's holder's record
			return w.Sources
		}
	}
	return nil
}

// shardMove says how many entries of shard s a reset redoes or skips:
// from the shard's low watermark to its new start. Offsets are counted by
// their difference; a Redis stream's entries are counted in Redis (names
// gives the streams, in shard order; up to lagCountCap).
func shardMove(ctx context.Context, c redis.UniversalClient, r *checkpoint.Reset, s int, names []string) string {
	low, to := r.From.Low(s), r.To[s]
	verb, from, until := "skip", low, to
	if to.Less(low) {
		verb, from, until = "redo", to, low
	}
	if !from.Less(until) {
		return fmt.Sprintf("shard %d: nothing to redo or skip (at %v already)", s, to)
	}
	switch {
	case from.Hi == 0 && until.Hi == 0: // offsets
		return fmt.Sprintf("shard %d: would %s %d entries (from %v to %v)", s, verb, until.Lo-from.Lo, from, until)
	case s < len(names) && names[s] != "":
		n, atLeast, err := countEntries(ctx, c, names[s], redisID(from), "("+redisID(until))
		if err != nil {
			return fmt.Sprintf("shard %d: would %s from %v to %v (entries of %s not counted: %v)", s, verb, from, until, names[s], oneLine(err.Error()))
		}
		at := ""
		if atLeast {
			at = "at least "
		}
		return fmt.Sprintf("shard %d: would %s %s%d entries of %s (from %v to %v)", s, verb, at, n, names[s], from, until)
	}
	return fmt.Sprintf("shard %d: would %s from %v to %v (give -streams to count its entries)", s, verb, from, until)
}

// resetTarget reads -to.
func resetTarget(ctx context.Context, c redis.UniversalClient, to, streams string) ([]transport.Position, error) {
	switch {
	case to == "start":
		return []transport.Position{{}}, nil
	case to == "end":
		if streams == "" {
			return nil, errors.New("end needs the group's Redis streams: no worker has recorded them and none runs, so give -streams (in shard order); for other logs give the positions")
		}
		var out []transport.Position
		for _, s := range strings.Split(streams, ",") {
			info, err := c.XInfoStream(ctx, s).Result()
			if err != nil {
				return nil, fmt.Errorf("stream %s: %w", s, err)
			}
			p, err := transport.ParsePosition(info.LastGeneratedID)
			if err != nil {
				return nil, fmt.Errorf("stream %s: last id %q: %w", s, info.LastGeneratedID, err)
			}
			out = append(out, p.Next())
		}
		return out, nil
	case strings.HasPrefix(to, "time:"):
		t, err := time.Parse(time.RFC3339, strings.TrimPrefix(to, "time:"))
		if err != nil {
			return nil, err
		}
		return []transport.Position{{Hi: uint64(t.UnixMilli())}}, nil
	}
	var out []transport.Position
	for _, x := range strings.Split(to, ",") {
		p, err := transport.ParsePosition(strings.TrimSpace(x))
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
