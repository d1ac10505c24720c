package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

const resetUsage = `usage: nandi checkpoint reset -redis URL -group NAME -to WHERE [-streams S0,S1,...] [-dry-run]
  WHERE is start (the log's beginning: everything is done again),
  end (the log's end, with -streams: the group's Redis streams, in shard order),
  time:2026-12-04T10:00:00Z (Redis Streams: the first entry at or after it),
  or a position for every shard (1234-0), or one per shard (1234-0,987-0)
The group must be stopped: every worker, and three intervals after the last.`

// cmdCheckpoint runs nandi checkpoint's subcommands.
func cmdCheckpoint(ctx context.Context, args []string, out, errOut io.Writer) int {
	if len(args) == 0 || args[0] != "reset" {
		fmt.Fprintln(errOut, resetUsage)
		return 2
	}
	fs := flag.NewFlagSet("checkpoint reset", flag.ContinueOnError)
	fs.SetOutput(errOut)
	url := fs.String("redis", "", "the group's Redis, as a URL: "+urlForms)
	group := fs.String("group", "", "the group's name (partition.Options.Name)")
	to := fs.String("to", "", "where every index starts again: start, end, time:RFC3339 or positions")
	streams := fs.String("streams", "", "with -to end: the group's Redis streams, comma-separated, in shard order")
	dry := fs.Bool("dry-run", false, "say what would be skipped or done again, and change nothing")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *group == "" || *to == "" || fs.NArg() > 0 {
		fmt.Fprintln(errOut, resetUsage)
		return 2
	}
	c, err := connect(ctx, *url)
	if err != nil {
		fmt.Fprintln(errOut, "nandi checkpoint reset:", err)
		return 2
	}
	defer c.Close()
	positions, err := resetTarget(ctx, c, *to, *streams)
	if err != nil {
		fmt.Fprintf(errOut, "nandi checkpoint reset: -to %s: %v\n%s\n", *to, err, resetUsage)
		return 2
	}
	r, err := checkpoint.NewRedis(c, *group).Reset(ctx, positions, *dry)
	if err != nil {
		fmt.Fprintln(errOut, "nandi checkpoint reset:", err) // ErrGroupRunning, ErrNoLedger, or the store's
		return 1
	}
	verb := "reset"
	if r.DryRun {
		verb = "would reset"
	}
	fmt.Fprintf(out, "group %s %s: epoch %d (of %d replicas) replaced by epoch %d, every index starting again at %v\n",
		*group, verb, r.From.N, r.From.R, r.N, r.To)
	for _, m := range r.Moves() {
		fmt.Fprintln(out, "  "+m)
	}
	if !r.DryRun {
		fmt.Fprintln(out, "workers started now read from there; nandi status shows the epoch")
	}
	return 0
}

// resetTarget reads -to.
func resetTarget(ctx context.Context, c redis.UniversalClient, to, streams string) ([]transport.Position, error) {
	switch {
	case to == "start":
		return []transport.Position{{}}, nil
	case to == "end":
		if streams == "" {
			return nil, errors.New("end needs -streams (the group's Redis streams, in shard order); for other logs give the positions")
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
