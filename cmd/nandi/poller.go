package main

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/nandi-go/nandi/presence"
	"github.com/redis/go-redis/v9"
)

// stripLen is how many intervals the page's strip keeps.
const stripLen = 300

// Cell is one interval of the strip.
type Cell struct {
	Interval int64 `json:"interval"`
	Count    int   `json:"count"`
	Closed   bool  `json:"closed"`
	// Rebalance: the count differs from the interval before's. Handover:
	// the two closed intervals before this one disagree, so no lease is
	// issued or renewed during it: the holders serve their old shares to
	// their caps, near its end (the lease rule). Generation: the store's
	// generation changed while this interval was current.
	Rebalance  bool `json:"rebalance,omitempty"`
	Handover   bool `json:"handover,omitempty"`
	Generation bool `json:"generation_changed,omitempty"`
}

// Change is a change the page lists under the strip: a rebalance (the
// count of registrations changed between two closed intervals) with the
// workers that joined or left around it, as the polls saw their presence.
type Change struct {
	At       time.Time `json:"at"`
	Interval int64     `json:"interval"` // the closed interval whose count changed, or the last closed one when only workers did
	From     int       `json:"from"`     // the count before
	To       int       `json:"to"`
	Workers  []string  `json:"joined_left,omitempty"` // "joined: a, b", "left: c"
}

// maxChanges is how many changes a snapshot lists.
const maxChanges = 20

// Row is one index of the current mapping and the worker holding it.
type Row struct {
	Index  int              `json:"index"`
	Holder *presence.Record `json:"holder"` // nil (null): no record of a holder
}

// Snapshot is what the page shows of a group at one moment.
type Snapshot struct {
	Group    string            `json:"group"`
	Status   *Status           `json:"status,omitempty"` // settings, counts, epochs, workers
	Error    string            `json:"error,omitempty"`  // reading the group failed
	Strip    []Cell            `json:"strip"`
	Replicas int               `json:"replicas"` // of the last closed interval
	Mapping  []Row             `json:"mapping"`
	Standby  []presence.Record `json:"standby"` // workers holding nothing of that mapping
	Changes  []Change          `json:"changes"` // the last changes, newest first
	Plan     *Plan             `json:"plan,omitempty"`
	Since    time.Time         `json:"watching_since"` // when this server began keeping the strip
	// Minutes are the handled tasks and failed attempts per minute over
	// the last hour (since this server began watching), oldest first.
	Minutes []Minute  `json:"minutes"`
	At      time.Time `json:"at"`
}

// tracker keeps a group's strip across polls (the store keeps only the
// last few intervals' counts): one poller per group, however many pages
// watch it, from the first time the group is asked for until the server
// stops.
type tracker struct {
	mu      sync.Mutex
	group   string
	since   time.Time
	cells   map[int64]*Cell
	lastGen string
	rtts    []time.Duration // the last round trips to the store (PING)
	seen    map[string]bool // the workers of the last poll (nil before the first)
	changes []Change        // oldest first
	rate    throughput      // handled and failed per minute

	latest  *Snapshot
	changed chan struct{} // closed and replaced when latest changes
	kick    chan struct{} // an action changed the group: poll now
}

func newTracker(group string) *tracker {
	return &tracker{group: group, since: time.Now(), cells: map[int64]*Cell{}, changed: make(chan struct{}), kick: make(chan struct{}, 1)}
}

// pollEvery is how often a group is read: a quarter interval, between
// 100ms and 1s (so every interval is seen closed at least once).
func pollEvery(snap *Snapshot) time.Duration {
	if snap.Status == nil {
		return time.Second
	}
	return min(max(snap.Status.Interval/4, 100*time.Millisecond), time.Second)
}

// run polls the group until ctx ends, publishing each snapshot.
func (tk *tracker) run(ctx context.Context, c redis.UniversalClient) {
	for {
		snap := tk.poll(ctx, c)
		if ctx.Err() != nil {
			return
		}
		tk.mu.Lock()
		tk.latest = snap
		close(tk.changed)
		tk.changed = make(chan struct{})
		tk.mu.Unlock()
		t := time.NewTimer(pollEvery(snap))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-tk.kick:
			t.Stop()
		}
	}
}

// current returns the latest snapshot (nil before the first) and a
// channel closed when there is a newer one.
func (tk *tracker) current() (*Snapshot, <-chan struct{}) {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	return tk.latest, tk.changed
}

// poll reads the group once (read-only) and returns the page's snapshot.
func (tk *tracker) poll(ctx context.Context, c redis.UniversalClient) *Snapshot {
	start := time.Now()
	pingErr := c.Ping(ctx).Err()
	rtt := time.Since(start)
	st, err := readStatus(ctx, c, tk.group)
	tk.mu.Lock()
	defer tk.mu.Unlock()
	snap := &Snapshot{Group: tk.group, Since: tk.since, At: time.Now()}
	if err != nil {
		snap.Error = err.Error()
		snap.Strip = tk.strip()
		return snap
	}
	if pingErr == nil {
		tk.rtts = append(tk.rtts, rtt)
		if len(tk.rtts) > 50 {
			tk.rtts = tk.rtts[1:]
		}
	}
	tk.observe(st)
	tk.rate.observe(snap.At, st.Workers)
	snap.Minutes = tk.rate.chart()
	tk.noteChanges(st, snap.At)
	snap.Status = st
	snap.Strip = tk.strip()
	snap.Changes = []Change{}
	for i := len(tk.changes) - 1; i >= 0; i-- {
		snap.Changes = append(snap.Changes, tk.changes[i])
	}
	for _, x := range st.Counts {
		if x.Interval == st.Current-1 {
			snap.Replicas = x.Count
		}
	}
	snap.Mapping, snap.Standby = mapping(st.Workers, snap.Replicas)
	if len(tk.rtts) > 0 && st.Interval > 0 { // a group with no lease has no settings to plan
		rs := slices.Clone(tk.rtts)
		slices.Sort(rs)
		med := rs[len(rs)/2]
		p := plan(st.Interval, st.Gap, max(snap.Replicas, len(st.Workers), 1), med, rs[len(rs)-1]-med)
		snap.Plan = &p
	}
	return snap
}

// observe merges a status's counts and generation into the strip.
func (tk *tracker) observe(st *Status) {
	for _, x := range st.Counts {
		cell := tk.cells[x.Interval]
		if cell == nil {
			cell = &Cell{Interval: x.Interval}
			tk.cells[x.Interval] = cell
		}
		cell.Count, cell.Closed = x.Count, x.Closed
	}
	if tk.lastGen != "" && st.Generation != tk.lastGen {
		if cell := tk.cells[st.Current]; cell != nil {
			cell.Generation = true
		}
	}
	tk.lastGen = st.Generation
	if len(tk.cells) > stripLen {
		keys := make([]int64, 0, len(tk.cells))
		for k := range tk.cells {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys[:len(keys)-stripLen] {
			delete(tk.cells, k)
		}
	}
}

// noteChanges records a rebalance (the last two closed counts differ) and
// the workers that joined or left since the last poll, merged into one
// change when they are within two intervals of each other (a worker's
// presence and its registration land an interval or so apart).
func (tk *tracker) noteChanges(st *Status, at time.Time) {
	counts := map[int64]int{}
	for _, x := range st.Counts {
		if x.Closed {
			counts[x.Interval] = x.Count
		}
	}
	last := st.Current - 1
	to, ok1 := counts[last]
	from, ok2 := counts[last-1]
	workers := membership(tk.seen, st.Workers)
	tk.seen = map[string]bool{}
	for _, r := range st.Workers {
		tk.seen[r.Worker] = true
	}
	var prev *Change
	if n := len(tk.changes); n > 0 {
		prev = &tk.changes[n-1]
	}
	rebalance := ok1 && ok2 && from != to && (prev == nil || prev.Interval != last || prev.From == prev.To)
	if !rebalance && len(workers) == 0 {
		return
	}
	if prev != nil && last-prev.Interval <= 2 && (!rebalance || prev.From == prev.To) {
		if rebalance {
			prev.Interval, prev.From, prev.To = last, from, to
		}
		prev.Workers = append(prev.Workers, workers...)
		return
	}
	c := Change{At: at, Interval: last, From: to, To: to, Workers: workers}
	if rebalance {
		c.From = from
	}
	tk.changes = append(tk.changes, c)
	if len(tk.changes) > maxChanges {
		tk.changes = tk.changes[1:]
	}
}

// strip returns the cells in order, with the marks that depend on their
// neighbours.
func (tk *tracker) strip() []Cell {
	keys := make([]int64, 0, len(tk.cells))
	for k := range tk.cells {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]Cell, 0, len(keys))
	for _, k := range keys {
		c := *tk.cells[k]
		prev, ok1 := tk.cells[k-1]
		prev2, ok2 := tk.cells[k-2]
		c.Rebalance = ok1 && prev.Closed && prev.Count != c.Count && (c.Closed || c.Count >= prev.Count)
		c.Handover = ok1 && ok2 && prev.Closed && prev2.Closed && prev.Count != prev2.Count
		out = append(out, c)
	}
	return out
}

// mapping places the records of the workers holding a share of replicas
// on their index; the others are on standby (joining, or between terms).
func mapping(workers []presence.Record, replicas int) ([]Row, []presence.Record) {
	rows := make([]Row, replicas)
	for i := range rows {
		rows[i].Index = i
	}
	standby := []presence.Record{}
	for i := range workers {
		w := workers[i]
		if w.Held && w.Replicas == replicas && w.Index >= 0 && w.Index < replicas && rows[w.Index].Holder == nil {
			rows[w.Index].Holder = &w
			continue
		}
		standby = append(standby, w)
	}
	sort.SliceStable(standby, func(i, j int) bool { return standby[i].Worker < standby[j].Worker })
	return rows, standby
}
