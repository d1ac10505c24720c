package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/redis/go-redis/v9"
)

// GroupSummary is one line of nandi groups.
type GroupSummary struct {
	Group       string `json:"group"`
	WorkerCount int    `json:"worker_count"` // presence records
	Replicas    int    `json:"replicas"`     // the count of the newest closed interval (0: no lease)
	// Lag is the group's lag per shard, as in nandi status (empty when
	// unknown); the table shows the largest.
	Lag []ShardLag `json:"lag"`
	// Paused is the group's pause, nil (null) when it runs.
	Paused *consumer.PauseState `json:"paused"`
	Dead   int64                `json:"dead"`
	// Problem says why the group could not be read whole (a corrupt
	// ledger); the rest is still given.
	Problem string `json:"problem,omitempty"`
}

// groupSuffixes are the keys (after "{group}:") that show a group exists:
// its lease, its checkpoint ledger, its dead letters, its pause, its
// workers' presence.
var groupSuffixes = []string{"lease", "ledger", "dead", "paused", "presence"}

// findGroups scans every master for the keys of groups (those of
// suffixes: groupSuffixes for every trace of a group) and returns their
// names, sorted.
func findGroups(ctx context.Context, c redis.UniversalClient, suffixes []string) ([]string, error) {
	seen := map[string]bool{}
	scan := func(ctx context.Context, node redis.Cmdable) error {
		iter := node.Scan(ctx, 0, "{*}:*", 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			end := strings.LastIndex(key, "}:")
			if !strings.HasPrefix(key, "{") || end < 0 {
				continue
			}
			if name, suffix := key[1:end], key[end+2:]; slices.Contains(suffixes, suffix) && partition.KeyPrefix(name) == key[:end+2] {
				seen[name] = true
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		var mu sync.Mutex // the masters are scanned at once, into one map
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, m)
		})
	} else {
		err = scan(ctx, c)
	}
	if err != nil {
		return nil, fmt.Errorf("listing the groups: %w", err)
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

func cmdGroups(ctx context.Context, args []string, out, errOut io.Writer) int {
	fs := newFlags("groups", out, errOut)
	url := fs.redisURL("the groups' Redis")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if code, ok := fs.parse(args); !ok {
		return code
	}
	c, code := fs.connected(ctx, *url)
	if c == nil {
		return code
	}
	defer c.Close()
	names, err := findGroups(ctx, c, groupSuffixes)
	if err != nil {
		return fs.failed(err)
	}
	var gs []GroupSummary
	for _, name := range names {
		st, err := readStatus(ctx, c, name)
		if err != nil {
			gs = append(gs, GroupSummary{Group: name, Problem: oneLine(err.Error())})
			continue
		}
		gs = append(gs, summarize(st))
	}
	if *asJSON {
		if gs == nil {
			gs = []GroupSummary{}
		}
		return printJSON(out, gs)
	}
	if len(gs) == 0 {
		fmt.Fprintln(out, "no groups on this Redis (no lease, checkpoints, dead letters or pause of any group; check -redis's database)")
		return exitOK
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tWORKERS\tREPLICAS\tLAG (ENTRIES, AGE)\tPAUSED\tDEAD")
	for _, g := range gs {
		lag, paused := "-", "no"
		if l := largest(g.Lag); l != nil {
			lag = shardLagText(*l)
			if l.Source != "" {
				lag += " in " + clean(l.Source)
			}
		}
		if g.Paused != nil {
			paused = "yes"
		}
		if g.Problem != "" {
			lag = "unreadable: " + clean(g.Problem)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\n", clean(g.Group), g.WorkerCount, g.Replicas, lag, paused, g.Dead)
	}
	tw.Flush()
	return exitOK
}

// summarize makes a group's line of its status.
func summarize(st *Status) GroupSummary {
	g := GroupSummary{Group: st.Group, WorkerCount: len(st.Workers), Paused: st.Paused, Dead: st.Dead, Problem: st.LedgerError, Lag: st.Lag}
	if g.Lag == nil {
		g.Lag = []ShardLag{}
	}
	for _, c := range st.Counts {
		if c.Closed {
			g.Replicas = c.Count
			break
		}
	}
	return g
}

// largest is the largest lag of the shards (by entries, then age), nil
// when none is known.
func largest(ls []ShardLag) *ShardLag {
	var out *ShardLag
	val := func(p *int64) int64 {
		if p == nil {
			return -1
		}
		return *p
	}
	age := func(p *float64) float64 {
		if p == nil {
			return -1
		}
		return *p
	}
	for i := range ls {
		l := &ls[i]
		if out == nil || val(l.Entries) > val(out.Entries) || val(l.Entries) == val(out.Entries) && age(l.AgeSeconds) > age(out.AgeSeconds) {
			out = l
		}
	}
	return out
}
