package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/deadletter"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/presence"
	"github.com/redis/go-redis/v9"
)

// Status is what status prints (and -json encodes).
type Status struct {
	Group      string        `json:"group"`
	Interval   time.Duration `json:"interval_ns"`
	Gap        float64       `json:"gap"`
	ServerTime time.Time     `json:"server_time"` // clamped as the script clamps it
	Current    int64         `json:"current_interval"`
	Offset     time.Duration `json:"offset_ns"` // of ServerTime in Current
	Generation string        `json:"generation"`
	// Paused is the group's pause (nandi pause), nil when it runs.
	Paused *consumer.PauseState `json:"paused"`
	// Dead is how many dead letters the group's stream
	// (deadletter.Stream) holds, and the newest of them, newest first.
	Dead       int64               `json:"dead"`
	DeadLatest []deadletter.Letter `json:"dead_latest,omitempty"`
	Counts     []Count             `json:"counts"` // newest first
	Epochs     []EpochStatus       `json:"epochs,omitempty"`
	// Misplaced describes the last task found in a shard its id does not
	// belong to, on a source declared aligned (its producers place
	// otherwise): from the checkpoint ledger (a log), or the group's
	// consumer.MisalignedKey (subscriptions). "" when none was.
	Misplaced string `json:"misplaced,omitempty"`
	// LedgerError says why the checkpoint ledger could not be read (a
	// corrupt field, named); the rest of the status is still shown.
	LedgerError string `json:"ledger_error,omitempty"`
	// Workers are the presence records of the group's workers (package
	// presence), holders first by index.
	Workers []presence.Record `json:"workers"`
	// Lag is the group's lag per shard of its current epoch, in entries
	// and age (nil without checkpoints, or with no worker running).
	Lag []ShardLag `json:"lag,omitempty"`
	// NoLease is true when the group has no lease state: no worker has
	// registered in the last 10 intervals (stopped, or never started);
	// Interval and the fields of the lease are then zero.
	NoLease bool `json:"no_lease,omitempty"`
}

// Unknown reports whether nothing of the group is on this Redis: no
// lease state, checkpoints, workers, pause or dead letters (a misspelt
// -group, or another database).
func (s *Status) Unknown() bool {
	return s.NoLease && len(s.Epochs) == 0 && s.LedgerError == "" && len(s.Workers) == 0 && s.Paused == nil && s.Dead == 0 && s.Misplaced == ""
}

// Count is one interval's registrations.
type Count struct {
	Interval int64 `json:"interval"`
	Count    int   `json:"count"`
	Closed   bool  `json:"closed"`
}

// EpochStatus is one checkpoint epoch.
type EpochStatus struct {
	N         int64             `json:"n"`
	Replicas  int               `json:"replicas"`
	Token     int64             `json:"token"`
	Current   bool              `json:"current"`
	Positions map[string]string `json:"positions"` // "shard/index" -> position
	// ResetAt is when nandi checkpoint reset (checkpoint.Redis.Reset)
	// created the epoch; omitted for one a worker's open created.
	ResetAt time.Time `json:"reset_at,omitzero"`
	// Fenced: the fenced handoff may leave the epoch (it was created for
	// new replicas); Held is how many indexes are opened and not released,
	// Ready how many of those are ready to hand over.
	Fenced bool `json:"fenced,omitempty"`
	Held   int  `json:"holding,omitempty"`
	Ready  int  `json:"ready,omitempty"`
}

// readStatus reads the group's lease state (partition.ReadGroup) and its
// checkpoint ledger (checkpoint.Redis.Read): one script each, on the
// master, through the packages that own the key layouts.
func readStatus(ctx context.Context, c redis.UniversalClient, group string) (*Status, error) {
	g, err := partition.ReadGroup(ctx, c, group)
	switch {
	case errors.Is(err, partition.ErrNoGroup):
		g = &partition.Group{} // stopped, or never started: the rest may still be there
	case err != nil:
		return nil, err
	}
	s := &Status{Group: group, Interval: g.Interval, Gap: g.Gap, ServerTime: g.ServerTime, Current: g.Current,
		Offset: g.Offset, Generation: g.Generation, NoLease: g.Interval == 0, Counts: []Count{}}
	for _, x := range g.Counts {
		s.Counts = append(s.Counts, Count{Interval: x.Interval, Count: x.Count, Closed: x.Closed})
	}
	st, err := checkpoint.NewRedis(c, group).Read(ctx)
	switch {
	case errors.Is(err, checkpoint.ErrCorrupt):
		s.LedgerError = err.Error()
		st = &checkpoint.State{}
	case err != nil:
		return nil, err
	}
	s.Misplaced = st.Misplaced
	if m, set, err := consumer.ReadMisaligned(ctx, c, group); err != nil {
		return nil, err
	} else if set {
		s.Misplaced = fmt.Sprintf("key %s in %s (shard %d; its id belongs to shard %d), since %s: the group reads every subject (clear with consumer.ClearMisaligned once the producers are fixed)",
			m.Key, m.Destination, m.Shard, m.BelongsTo, m.Since.Format(time.RFC3339))
	}
	for _, e := range st.History {
		es := EpochStatus{N: e.N, Replicas: e.R, Token: e.Token, Current: st.Current != nil && e.N == st.Current.N, Positions: map[string]string{}, ResetAt: e.ResetAt,
			Fenced: e.Fenced, Held: e.Held, Ready: e.Ready}
		for sh := range e.Start {
			for k := range e.R {
				es.Positions[fmt.Sprintf("%d/%d", sh, k)] = e.At(sh, k).String()
			}
		}
		s.Epochs = append(s.Epochs, es)
	}
	if s.Workers, err = presence.Read(ctx, c, group); err != nil {
		return nil, err
	}
	if s.Workers == nil {
		s.Workers = []presence.Record{} // none: empty, never null in JSON
	}
	if s.LedgerError == "" {
		if s.Lag, err = readLag(ctx, c, st, s.Workers); err != nil {
			return nil, err
		}
	}
	if s.Dead, err = c.XLen(ctx, deadletter.Stream(group)).Result(); err != nil {
		return nil, err
	}
	if s.Dead > 0 {
		if s.DeadLatest, err = deadletter.Latest(ctx, c, deadletter.Stream(group), 10); err != nil {
			return nil, err
		}
	}
	if p, paused, err := consumer.ReadPause(ctx, c, group); err != nil {
		return nil, err
	} else if paused {
		s.Paused = &p
	}
	return s, nil
}

func printStatus(w io.Writer, s *Status) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "group\t%s\n", s.Group)
	if s.NoLease {
		fmt.Fprintf(tw, "lease\tnone: no worker has registered in the last 10 intervals (the group is stopped)\n")
	} else {
		fmt.Fprintf(tw, "settings\tinterval %v, gap %g (%v)\n", s.Interval, s.Gap, partition.Margin(s.Interval, s.Gap))
		fmt.Fprintf(tw, "server time\t%s, interval %d at %v\n", s.ServerTime.Format(time.RFC3339Nano), s.Current, s.Offset)
		fmt.Fprintf(tw, "generation\t%s\n", s.Generation)
	}
	if s.Dead > 0 {
		fmt.Fprintf(tw, "dead letters\t%d in %s (nandi dead list)\n", s.Dead, deadletter.Stream(s.Group))
	}
	if s.Misplaced != "" {
		fmt.Fprintf(tw, "misplaced\t%s\n", clean(s.Misplaced))
	}
	if s.Paused != nil {
		fmt.Fprintf(tw, "paused\tsince %s%s: no worker starts a task (nandi resume)\n", s.Paused.Since.Format(time.RFC3339), reasonText(s.Paused.Reason))
	}
	tw.Flush()
	fmt.Fprintln(w)
	if s.NoLease {
		printWorkers(w, s)
		printEpochs(w, s)
		return
	}
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INTERVAL\tREGISTERED\tSTATE")
	for _, c := range s.Counts {
		state := "open"
		if c.Closed {
			state = "closed"
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\n", c.Interval, c.Count, state)
	}
	tw.Flush()
	fmt.Fprintln(w)
	printWorkers(w, s)
	printEpochs(w, s)
	printLag(w, s)
}

// printEpochs prints the group's checkpoints, or why there are none.
func printEpochs(w io.Writer, s *Status) {
	if s.LedgerError != "" {
		fmt.Fprintf(w, "\ncheckpoints unreadable: %s\n", clean(s.LedgerError))
		return
	}
	if len(s.Epochs) == 0 {
		fmt.Fprintln(w, "\nno checkpoints (the group reads no log, or has not started)")
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EPOCH\tREPLICAS\tTOKEN\tSHARD/INDEX\tPOSITION")
	for _, e := range s.Epochs {
		keys := make([]string, 0, len(e.Positions))
		for k := range e.Positions {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			var a1, b1, a2, b2 int
			fmt.Sscanf(keys[i], "%d/%d", &a1, &b1)
			fmt.Sscanf(keys[j], "%d/%d", &a2, &b2)
			return a1 < a2 || a1 == a2 && b1 < b2
		})
		mark := ""
		if e.Current {
			mark = " (current)"
		}
		if !e.ResetAt.IsZero() {
			mark += " (reset " + e.ResetAt.Format(time.RFC3339) + ")"
		}
		if e.Current && e.Fenced && (e.Ready > 0 || e.Held < e.Replicas) {
			mark += fmt.Sprintf(" (handing over: %d of %d indexes released, %d ready)", e.Replicas-e.Held, e.Replicas, e.Ready)
		}
		for i, k := range keys {
			if i == 0 {
				fmt.Fprintf(tw, "%d%s\t%d\t%d\t%s\t%s\n", e.N, mark, e.Replicas, e.Token, k, e.Positions[k])
			} else {
				fmt.Fprintf(tw, "\t\t\t%s\t%s\n", k, e.Positions[k])
			}
		}
	}
	tw.Flush()
}

// groupArgs parses -redis, -group (and -json, when withJSON) and
// connects; on failure it has said why and returns the exit code (0 after
// help).
func groupArgs(ctx context.Context, f *flags, args []string, withJSON bool) (c redis.UniversalClient, group string, asJSON bool, code int) {
	url := f.redisURL("the group's Redis")
	g := f.String("group", "", "the group's name (partition.Options.Name)")
	var j *bool
	if withJSON {
		j = f.Bool("json", false, "print JSON instead of a table")
	}
	if code, ok := f.parse(args); !ok {
		return nil, "", false, code
	}
	if *g == "" {
		return nil, "", false, f.usageError("-group is required (nandi groups lists the groups on a Redis)")
	}
	c, code = f.connected(ctx, *url)
	if c == nil {
		return nil, "", false, code
	}
	return c, *g, j != nil && *j, exitOK
}

func cmdStatus(ctx context.Context, args []string, out, errOut io.Writer) int {
	f := newFlags("status", out, errOut)
	c, group, asJSON, code := groupArgs(ctx, f, args, true)
	if c == nil {
		return code
	}
	defer c.Close()
	s, err := readStatus(ctx, c, group)
	if err != nil {
		return f.failed(err)
	}
	if s.Unknown() {
		fmt.Fprintf(errOut, "nandi status: no group %q on this Redis: no worker has registered, and it has no checkpoints, pause or dead letters (check -group, and -redis's database)\n", group)
		return exitFailed
	}
	if asJSON {
		return printJSON(out, s)
	}
	printStatus(out, s)
	return 0
}

// watchHeader heads watch's lines.
const watchHeader = "TIME                      INTERVAL    COUNT  PREV  GENERATION          EPOCH             CHANGES"

// watchLine is one line of watch: the interval that just closed, its
// count and the one before, the generation, the epoch and what changed.
func watchLine(at time.Time, interval int64, count, prev int, gen, epoch string, changes []string) string {
	return fmt.Sprintf("%-24s  %-10d  %5d  %4d  %-18s  %-16s  %s\n", at.Format("2006-01-02T15:04:05.000Z"), interval, count, prev, gen, epoch,
		strings.Join(changes, "; "))
}

// pauseEvent says how the pause changed from was to now ("" when it did
// not; at the first read, only a pause that is on).
func pauseEvent(was, now *consumer.PauseState, first bool) string {
	switch {
	case now != nil && (was == nil || first):
		return fmt.Sprintf("PAUSED since %s%s", now.Since.Format(time.RFC3339), reasonText(now.Reason))
	case now != nil && was.Reason != now.Reason:
		return fmt.Sprintf("PAUSE reason now %q (was %q)", now.Reason, was.Reason)
	case now == nil && was != nil:
		return "RESUMED"
	}
	return ""
}

// cmdWatch prints one line per interval, just after it closes: its count,
// the one before, and the current epoch.
func cmdWatch(ctx context.Context, args []string, out, errOut io.Writer) int {
	f := newFlags("watch", out, errOut)
	c, group, _, code := groupArgs(ctx, f, args, false)
	if c == nil {
		return code
	}
	defer c.Close()
	fmt.Fprintln(out, watchHeader)
	var last int64
	var seen map[string]bool // the workers at the last line
	var pause *consumer.PauseState
	first := true
	for {
		s, err := readStatus(ctx, c, group)
		if ctx.Err() != nil {
			return 0
		}
		if err == nil {
			// A pause, a resume or a new reason is a line of its own, as it
			// is read (a stopped group's too).
			if ev := pauseEvent(pause, s.Paused, first); ev != "" {
				fmt.Fprintf(out, "%-24s  %-10s  %5s  %4s  %-18s  %-16s  %s\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), "-", "-", "-", "-", "-", ev)
			}
			pause, first = s.Paused, false
		}
		wait := time.Second
		switch {
		case err != nil:
			fmt.Fprintln(errOut, time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), " nandi watch:", oneLine(err.Error()))
		case s.NoLease:
			if last != -1 { // once per spell
				fmt.Fprintf(errOut, "%s  nandi watch: no worker of group %q has registered in the last 10 intervals; waiting for one\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), group)
			}
			last = -1
		default:
			if s.Current != last {
				last = s.Current
				var cnt, prev int
				for _, k := range s.Counts {
					switch k.Interval {
					case s.Current - 1:
						cnt = k.Count
					case s.Current - 2:
						prev = k.Count
					}
				}
				epoch := "-"
				for _, e := range s.Epochs {
					if e.Current {
						epoch = fmt.Sprintf("%d (%s)", e.N, plural(e.Replicas, "replica"))
					}
				}
				gen := s.Generation
				if len(gen) > 18 {
					gen = gen[:18]
				}
				changes := membership(seen, s.Workers)
				if cnt != prev && prev != 0 {
					// The holders serve their old shares to their caps, at the end
					// of the interval that has begun; the new mapping follows.
					changes = append([]string{fmt.Sprintf("REBALANCE %d -> %d, handover to the end of this interval", prev, cnt)}, changes...)
				}
				seen = map[string]bool{}
				for _, r := range s.Workers {
					seen[r.Worker] = true
				}
				if len(changes) == 0 {
					changes = []string{"-"}
				}
				fmt.Fprint(out, watchLine(s.ServerTime, s.Current-1, cnt, prev, gen, epoch, changes))
			}
			// Just after the next interval begins, past its gap.
			wait = s.Interval - s.Offset + partition.Margin(s.Interval, s.Gap)
		}
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(wait):
		}
	}
}
