package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nandi-go/nandi/deadletter"
	"github.com/nandi-go/nandi/transport/redisstream"
)

// cmdDead runs nandi dead's subcommands.
func cmdDead(ctx context.Context, args []string, out, errOut io.Writer) int {
	return subcommand(ctx, "dead", args, out, errOut, map[string]func(context.Context, []string, io.Writer, io.Writer) int{
		"list": func(ctx context.Context, args []string, out, errOut io.Writer) int {
			return deadCmd(ctx, "list", args, out, errOut)
		},
		"replay": func(ctx context.Context, args []string, out, errOut io.Writer) int {
			return deadCmd(ctx, "replay", args, out, errOut)
		},
	})
}

// deadCmd runs nandi dead list or replay. DEAD is the dead-letter stream
// (default {NAME}:dead, deadletter.Stream); replay's -to names the
// group's source streams in shard order: each task goes back to its
// key's stream and is deleted from DEAD.
func deadCmd(ctx context.Context, sub string, args []string, out, errOut io.Writer) int {
	fs := newFlags("dead "+sub, out, errOut)
	url := fs.redisURL("the group's Redis")
	group := fs.String("group", "", "the group's name (partition.Options.Name)")
	stream := fs.String("stream", "", "the dead-letter stream (default {group}:dead)")
	from := fs.String("from", "-", "the first entry ID")
	until := fs.String("until", "+", "the last entry ID")
	count := fs.Int64("count", 100, "list: the most letters shown")
	asJSON := fs.Bool("json", false, "list: print JSON")
	to := fs.String("to", "", "replay: the group's source streams, comma-separated, in shard order")
	unaligned := fs.Bool("unaligned", false, "replay: the source streams are not aligned (redisstream.Options.Unaligned)")
	ids := fs.String("id", "", "replay: the letters' entry IDs, comma-separated")
	all := fs.Bool("all", false, "replay: every letter from -from to -until")
	if code, ok := fs.parse(args); !ok {
		return code
	}
	if *group == "" {
		return fs.usageError("-group is required")
	}
	if sub == "replay" && (*to == "" || (*ids == "" && !*all) || (*ids != "" && *all)) {
		return fs.usageError("give -to, and either -id or -all (with -from and -until to bound it)")
	}
	if *stream == "" {
		*stream = deadletter.Stream(*group)
	}
	c, code := fs.connected(ctx, *url)
	if c == nil {
		return code
	}
	defer c.Close()

	if sub == "list" {
		ls, err := deadletter.List(ctx, c, *stream, *from, *until, *count)
		if err != nil {
			fmt.Fprintln(errOut, "nandi dead list:", err)
			return 1
		}
		if *asJSON {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			_ = enc.Encode(ls)
			return 0
		}
		if len(ls) == 0 {
			fmt.Fprintf(out, "no dead letters in %s\n", *stream)
			return 0
		}
		tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tAT\tKEY\tATTEMPTS\tWORKER\tTERM\tFROM\tERROR")
		for _, l := range ls {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d of %d, token %d\tshard %d at %s\t%s\n", l.ID, l.At.Format(time.RFC3339),
				clean(l.Key), l.Attempts, clean(l.Worker), l.Index, l.Replicas, l.Token, l.Shard, l.Position, clean(l.Error))
		}
		tw.Flush()
		return 0
	}

	src, err := redisstream.NewSharded(c, strings.Split(*to, ","), redisstream.Options{Unaligned: *unaligned})
	if err != nil {
		fmt.Fprintln(errOut, "nandi dead replay:", err)
		return 2
	}
	p, err := src.Producer(redisstream.ProducerOptions{})
	if err != nil {
		fmt.Fprintln(errOut, "nandi dead replay:", err)
		return 2
	}
	var ls []deadletter.Letter
	if *all {
		if ls, err = deadletter.List(ctx, c, *stream, *from, *until, 1<<62); err != nil {
			fmt.Fprintln(errOut, "nandi dead replay:", err)
			return 1
		}
	} else {
		for _, id := range strings.Split(*ids, ",") {
			one, err := deadletter.List(ctx, c, *stream, id, id, 1)
			if err != nil {
				fmt.Fprintln(errOut, "nandi dead replay:", err)
				return 1
			}
			if len(one) == 0 {
				fmt.Fprintf(errOut, "nandi dead replay: no letter %s in %s\n", id, *stream)
				return 1
			}
			ls = append(ls, one...)
		}
	}
	n, err := deadletter.Replay(ctx, c, *stream, ls, p)
	fmt.Fprintf(out, "replayed %d of %d dead letters from %s to %s\n", n, len(ls), *stream, *to)
	if err != nil {
		fmt.Fprintln(errOut, "nandi dead replay:", err)
		return 1
	}
	return 0
}
