package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/nandi-go/nandi/deadletter"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/redis/go-redis/v9"
)

// cmdDead runs nandi dead's subcommands.
func cmdDead(ctx context.Context, args []string, out, errOut io.Writer) int {
	return subcommand(ctx, "dead", args, out, errOut, map[string]func(context.Context, []string, io.Writer, io.Writer) int{
		"list":   deadList,
		"show":   deadShow,
		"replay": deadReplay,
	})
}

// deadFlags are the flags every dead subcommand has: the group's Redis,
// the group, and its dead-letter stream (default {NAME}:dead,
// deadletter.Stream).
type deadFlags struct {
	*flags
	url, group, stream *string
}

func newDeadFlags(sub string, out, errOut io.Writer) *deadFlags {
	fs := newFlags("dead "+sub, out, errOut)
	return &deadFlags{flags: fs, url: fs.redisURL("the group's Redis"),
		group:  fs.String("group", "", "the group's name (partition.Options.Name)"),
		stream: fs.String("stream", "", "the dead-letter stream (default {group}:dead)")}
}

// connect checks -group, fills -stream's default and connects; a group
// that has none of its keys is refused (a typo would read as "no dead
// letters"), and so is a -stream that does not exist.
func (f *deadFlags) connect(ctx context.Context) (redis.UniversalClient, int) {
	if *f.group == "" {
		return nil, f.usageError("-group is required")
	}
	given := *f.stream != ""
	if !given {
		*f.stream = deadletter.Stream(*f.group)
	}
	c, code := f.connected(ctx, *f.url)
	if c == nil {
		return nil, code
	}
	err := checkGroup(ctx, c, *f.group)
	if err == nil && given {
		if n, xerr := c.Exists(ctx, *f.stream).Result(); xerr != nil {
			err = xerr
		} else if n == 0 {
			err = fmt.Errorf("no stream %q on this Redis (-stream names the dead-letter stream; without it, %s)", *f.stream, deadletter.Stream(*f.group))
		}
	}
	if err != nil {
		_ = c.Close()
		return nil, f.failed(err)
	}
	return c, exitOK
}

func deadList(ctx context.Context, args []string, out, errOut io.Writer) int {
	fs := newDeadFlags("list", out, errOut)
	from := fs.String("from", "-", "the first entry ID")
	until := fs.String("until", "+", "the last entry ID")
	count := fs.Int64("count", 100, "the most letters shown")
	asJSON := fs.Bool("json", false, "print JSON")
	if code, ok := fs.parse(args); !ok {
		return code
	}
	for name, v := range map[string]string{"-from": *from, "-until": *until} {
		if err := entryID(v, true); err != nil {
			return fs.usageError("%s %s", name, err)
		}
	}
	c, code := fs.connect(ctx)
	if c == nil {
		return code
	}
	defer c.Close()
	ls, err := deadletter.List(ctx, c, *fs.stream, *from, *until, *count)
	if err != nil {
		return fs.failed(err)
	}
	if *asJSON {
		return printJSON(out, ls)
	}
	if len(ls) == 0 {
		fmt.Fprintf(out, "no dead letters in %s\n", *fs.stream)
		return exitOK
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tAT\tKEY\tATTEMPTS\tWORKER\tTERM\tFROM\tPAYLOAD\tERROR")
	for _, l := range ls {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d of %d, token %d\t%s\t%s\t%s\n", l.ID, l.At.Format(time.RFC3339),
			clean(l.Key), l.Attempts, clean(l.Worker), l.Index, l.Replicas, l.Token, from1(l), payloadShort(l.Payload, 24), clean(l.Error))
	}
	tw.Flush()
	return exitOK
}

// entryID checks a stream entry ID as the commands take it: MS-SEQ or
// MS; bound also allows XRANGE's "-", "+" and "(" before an ID.
func entryID(id string, bound bool) error {
	if bound && (id == "-" || id == "+") {
		return nil
	}
	if bound {
		id = strings.TrimPrefix(id, "(")
	}
	ms, seq, hasSeq := strings.Cut(id, "-")
	digits := func(s string) bool {
		return s != "" && strings.Trim(s, "0123456789") == ""
	}
	if !digits(ms) || (hasSeq && !digits(seq)) {
		return fmt.Errorf("%q is not a stream entry ID: MS-SEQ, as nandi dead list shows it (1733400000000-0)", id)
	}
	return nil
}

// from1 says where a letter's task came from, in one table cell.
func from1(l deadletter.Letter) string {
	if l.Source == "" {
		return fmt.Sprintf("shard %d at %s", l.Shard, l.Position)
	}
	return fmt.Sprintf("%s at %s", clean(l.Source), l.Position)
}

// payloadText returns a payload as text when it is UTF-8 without control
// characters (but newlines and tabs), else as hex, and which it is.
func payloadText(p []byte) (text, form string) {
	if utf8.Valid(p) && !strings.ContainsFunc(string(p), func(r rune) bool {
		return r != '\n' && r != '\t' && (r < 0x20 || r == 0x7f)
	}) {
		return string(p), "text"
	}
	return hex.EncodeToString(p), "hex"
}

// payloadShort is a payload's first n characters, in one table cell.
func payloadShort(p []byte, n int) string {
	text, form := payloadText(p)
	if form == "hex" {
		text = "0x" + text
	}
	text = clean(strings.Join(strings.Fields(text), " "))
	if r := []rune(text); len(r) > n {
		text = string(r[:n-1]) + "…"
	}
	if text == "" {
		return "(empty)"
	}
	return text
}

func deadShow(ctx context.Context, args []string, out, errOut io.Writer) int {
	fs := newDeadFlags("show", out, errOut)
	asJSON := fs.Bool("json", false, "print JSON (the payload as base64, as dead list -json)")
	if code, ok := fs.parseArgs(args, "one letter's ID (nandi dead list shows them)"); !ok {
		return code
	}
	id := fs.Arg(0)
	if err := entryID(id, false); err != nil {
		return fs.usageError("%s", err)
	}
	c, code := fs.connect(ctx)
	if c == nil {
		return code
	}
	defer c.Close()
	ls, err := deadletter.List(ctx, c, *fs.stream, id, id, 1)
	if err != nil {
		return fs.failed(err)
	}
	if len(ls) == 0 {
		return fs.failed(fmt.Errorf("no letter %s in %s", id, *fs.stream))
	}
	l := ls[0]
	if *asJSON {
		return printJSON(out, l)
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("id:", l.ID)
	row("at:", l.At.Format(time.RFC3339Nano))
	row("key:", clean(l.Key))
	row("error:", clean(l.Error))
	row("attempts:", fmt.Sprint(l.Attempts))
	row("worker:", clean(l.Worker))
	row("term:", fmt.Sprintf("index %d of %d, token %d", l.Index, l.Replicas, l.Token))
	source := clean(l.Source)
	if source == "" {
		source = "(not recorded)"
	}
	row("source:", fmt.Sprintf("%s %s, shard %d at %s", l.System, source, l.Shard, l.Position))
	for _, h := range slices.Sorted(maps.Keys(l.Headers)) {
		row("header "+clean(h)+":", clean(l.Headers[h]))
	}
	text, form := payloadText(l.Payload)
	row("payload:", fmt.Sprintf("%d bytes, as %s", len(l.Payload), form))
	tw.Flush()
	fmt.Fprintln(out, text)
	return exitOK
}

func deadReplay(ctx context.Context, args []string, out, errOut io.Writer) int {
	fs := newDeadFlags("replay", out, errOut)
	from := fs.String("from", "-", "the first entry ID")
	until := fs.String("until", "+", "the last entry ID")
	to := fs.String("to", "", "the group's source streams, comma-separated, in shard order (default: each letter back to the stream it came from)")
	create := fs.Bool("create", false, "with -to: create a stream of -to that does not exist (else refused: a typo would replay to a stream nobody reads)")
	unaligned := fs.Bool("unaligned", false, "with -to: the source streams are not aligned (redisstream.Options.Unaligned)")
	ids := fs.String("id", "", "the letters' entry IDs, comma-separated")
	all := fs.Bool("all", false, "every letter from -from to -until")
	if code, ok := fs.parse(args); !ok {
		return code
	}
	if (*ids == "") == !*all {
		return fs.usageError("give either -id or -all (with -from and -until to bound it)")
	}
	if *create && *to == "" {
		return fs.usageError("-create goes with -to")
	}
	for name, v := range map[string]string{"-from": *from, "-until": *until} {
		if err := entryID(v, true); err != nil {
			return fs.usageError("%s %s", name, err)
		}
	}
	if *ids != "" {
		for _, id := range strings.Split(*ids, ",") {
			if err := entryID(id, false); err != nil {
				return fs.usageError("-id %s", err)
			}
		}
	}
	if *ids != "" {
		for _, id := range strings.Split(*ids, ",") {
			if err := entryID(id, false); err != nil {
				return fs.usageError("-id %s", err)
			}
		}
	}
	c, code := fs.connect(ctx)
	if c == nil {
		return code
	}
	defer c.Close()

	var ls []deadletter.Letter
	var err error
	if *all {
		if ls, err = deadletter.List(ctx, c, *fs.stream, *from, *until, 1<<62); err != nil {
			return fs.failed(err)
		}
	} else {
		for _, id := range strings.Split(*ids, ",") {
			one, err := deadletter.List(ctx, c, *fs.stream, id, id, 1)
			if err != nil {
				return fs.failed(err)
			}
			if len(one) == 0 {
				return fs.failed(fmt.Errorf("no letter %s in %s", id, *fs.stream))
			}
			ls = append(ls, one...)
		}
	}

	if *to != "" {
		streams := strings.Split(*to, ",")
		if !*create {
			if missing := missingStreams(ctx, c, streams); len(missing) > 0 {
				return fs.failed(fmt.Errorf("no stream %s on this Redis: check -to (the group's source streams), or give -create to make it; no letter was replayed", strings.Join(missing, ", ")))
			}
		}
		src, err := redisstream.NewSharded(c, streams, redisstream.Options{Unaligned: *unaligned})
		if err != nil {
			return fs.failed(err)
		}
		p, err := src.Producer(redisstream.ProducerOptions{})
		if err != nil {
			return fs.failed(err)
		}
		n, err := deadletter.Replay(ctx, c, *fs.stream, ls, p)
		fmt.Fprintf(out, "replayed %d of %d dead letters from %s to %s\n", n, len(ls), *fs.stream, *to)
		if err != nil {
			return fs.failed(err)
		}
		return exitOK
	}

	// Each letter back where it came from: its own stream.
	for _, l := range ls {
		switch {
		case l.Source == "":
			return fs.failed(fmt.Errorf("letter %s does not say where it came from (written before nandi recorded it): give -to; no letter was replayed", l.ID))
		case l.System != "redis":
			return fs.failed(fmt.Errorf("letter %s came from %s %s, not a Redis stream: replay it with that transport (deadletter.Replay with its Publisher); no letter was replayed", l.ID, l.System, l.Source))
		}
	}
	sources := map[string]bool{}
	for _, l := range ls {
		sources[l.Source] = true
	}
	if missing := missingStreams(ctx, c, slices.Sorted(maps.Keys(sources))); len(missing) > 0 {
		return fs.failed(fmt.Errorf("the letters' source stream %s is gone: give -to (with -create to make it); no letter was replayed", strings.Join(missing, ", ")))
	}
	n, err := deadletter.ReplayEach(ctx, c, *fs.stream, ls, toSource(c))
	fmt.Fprintf(out, "replayed %d of %d dead letters from %s to %s\n", n, len(ls), *fs.stream, strings.Join(slices.Sorted(maps.Keys(sources)), ","))
	if err != nil {
		return fs.failed(err)
	}
	return exitOK
}

// toSource routes each letter back to the Redis stream it came from
// (deadletter.ReplayEach): a producer of that stream writes the key's task
// there, whatever shard of the group it is. One producer per stream.
func toSource(c redis.UniversalClient) func(deadletter.Letter) (transport.Publisher, error) {
	producers := map[string]transport.Publisher{}
	return func(l deadletter.Letter) (transport.Publisher, error) {
		if p, ok := producers[l.Source]; ok {
			return p, nil
		}
		src, err := redisstream.New(c, l.Source, redisstream.Options{})
		if err != nil {
			return nil, err
		}
		p, err := src.Producer(redisstream.ProducerOptions{})
		producers[l.Source] = p
		return p, err
	}
}

// missingStreams returns those of streams that do not exist on c.
func missingStreams(ctx context.Context, c redis.UniversalClient, streams []string) []string {
	var missing []string
	for _, s := range streams {
		if n, err := c.Exists(ctx, s).Result(); err != nil || n == 0 {
			missing = append(missing, s)
		}
	}
	return missing
}
