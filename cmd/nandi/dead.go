package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nandi-go/nandi/deadletter"
	"github.com/nandi-go/nandi/transport/redisstream"
)

const deadUsage = `usage:
  nandi dead list   -redis URL -group NAME [-stream DEAD] [-from ID] [-until ID] [-count N] [-json]
  nandi dead replay -redis URL -group NAME [-stream DEAD] -to S0,S1,... [-unaligned] (-id ID,... | -from ID -until ID | -all)
DEAD is the dead-letter stream (default {NAME}:dead, deadletter.Stream); -to the group's source
streams in shard order: each task goes back to its key's stream and is deleted from DEAD.`

// cmdDead runs nandi dead's subcommands.
func cmdDead(ctx context.Context, args []string, out, errOut io.Writer) int {
	if len(args) == 0 || (args[0] != "list" && args[0] != "replay") {
		fmt.Fprintln(errOut, deadUsage)
		return 2
	}
	sub := args[0]
	fs := flag.NewFlagSet("dead "+sub, flag.ContinueOnError)
	fs.SetOutput(errOut)
	url := fs.String("redis", "", "the group's Redis, as a URL: "+urlForms)
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
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *group == "" || fs.NArg() > 0 {
		fmt.Fprintln(errOut, deadUsage)
		return 2
	}
	if *stream == "" {
		*stream = deadletter.Stream(*group)
	}
	c, err := connect(ctx, *url)
	if err != nil {
		fmt.Fprintf(errOut, "nandi dead %s: %v\n", sub, err)
		return 2
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

	if *to == "" || (*ids == "" && !*all) || (*ids != "" && *all) {
		fmt.Fprintln(errOut, "nandi dead replay: give -to, and either -id or -all (with -from and -until to bound it)")
		fmt.Fprintln(errOut, deadUsage)
		return 2
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
