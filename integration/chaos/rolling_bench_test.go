package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"text/tabwriter"
	"time"
)

// readyAt returns when worker id recorded itself ready (mono), waiting up
// to a minute for it.
func (f *fleet) readyAt(id int) int64 {
	name := filepath.Join(f.dir, fmt.Sprintf("worker-%d.jsonl", id))
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if fh, err := os.Open(name); err == nil {
			sc := bufio.NewScanner(fh)
			for sc.Scan() {
				var r record
				if json.Unmarshal(sc.Bytes(), &r) == nil && r.Kind == "ready" {
					_ = fh.Close()
					return r.At
				}
			}
			_ = fh.Close()
		}
		time.Sleep(time.Millisecond)
	}
	f.t.Fatalf("worker %d never turned ready", id)
	return 0
}

// waitWhole waits until the workers' records show a mapping of n wholly
// held.
func (f *fleet) waitWhole(n int) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if h, err := readHistory(f.dir); err == nil {
			now := mono()
			held := map[int]bool{}
			for _, hd := range h.holds {
				if hd.replicas == n && hd.start <= now && now < hd.end {
					held[hd.index] = true
				}
			}
			if len(held) == n {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.t.Fatalf("the group of %d never formed", n)
}

// termAsync sends SIGTERM and lets the worker drain and exit on its own, as
// Kubernetes does with a terminating pod.
func (f *fleet) termAsync(id int) {
	f.signal(id, 15)
}

// complete reports whether, at x, some mapping of n is wholly held.
func (h *history) completeAt(x int64) bool {
	byN := map[int]map[int]bool{}
	for _, hd := range h.holds {
		if hd.start <= x && x < hd.end {
			if byN[hd.replicas] == nil {
				byN[hd.replicas] = map[int]bool{}
			}
			byN[hd.replicas][hd.index] = true
		}
	}
	for n, idx := range byN {
		if len(idx) == n {
			return true
		}
	}
	return false
}

// standDown is the time in [from, to) during which no mapping was wholly
// held: some share of the work had no owner.
func (h *history) standDown(from, to int64) time.Duration {
	times := h.changes(from, to)
	var d int64
	for i := 0; i+1 < len(times); i++ {
		a, b := times[i], times[i+1]
		if b > a && !h.completeAt(a+(b-a)/2) {
			d += b - a
		}
	}
	return time.Duration(d)
}

type rollout struct {
	name   string
	serve  bool // every worker with consumer.Options.ServeToCap
	before bool // every worker ends its term at once when its mapping changes (the rule before leases were kept to their cap)
	// step replaces the old workers by new ones, as a Deployment would.
	step func(f *fleet, old []int) (news []int)
}

// BenchmarkRollingUpdate replaces a fleet of 10 worker processes the ways
// a Kubernetes Deployment can, with readiness from health.ConsumerHandler
// in Registering mode and tasks flowing, and prints what each costs: the
// time no mapping was wholly held (some share had no owner), the time from
// the rollout's start until the new fleet is fully assigned, and the tasks
// done twice (from the fenced sink).
//
//	go test -run '^$' -bench RollingUpdate -benchtime 1x ./integration/chaos/
func BenchmarkRollingUpdate(b *testing.B) {
	const n = 10
	iv := 300 * time.Millisecond
	oneByOne := func(minReady time.Duration) func(f *fleet, old []int) []int {
		return func(f *fleet, old []int) []int {
			var news []int
			for _, o := range old {
				id := f.startWith(f.interval, f.extra...)
				f.readyAt(id)
				time.Sleep(minReady)
				f.termAsync(o)
				news = append(news, id)
			}
			return news
		}
	}
	surgeAll := func(f *fleet, old []int) []int {
		var news []int
		for range old {
			news = append(news, f.startWith(f.interval, f.extra...))
		}
		for _, id := range news {
			f.readyAt(id)
		}
		for _, o := range old {
			f.termAsync(o)
		}
		return news
	}
	rollouts := []rollout{
		{name: "one by one, standing down at once (before)", step: oneByOne(0), before: true},
		{name: "all at once, standing down at once (before)", step: surgeAll, before: true},
		{name: "one by one (maxSurge 1, maxUnavailable 0)", step: oneByOne(0)},
		{name: "one by one, minReadySeconds 2 intervals", step: oneByOne(2 * iv)},
		{name: "all at once (maxSurge 100%)", step: surgeAll},
		{name: "one by one, ServeToCap", step: oneByOne(0), serve: true},
		{name: "all at once, ServeToCap", step: surgeAll, serve: true},
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "rolling update of %d workers, %v interval, median (min-max) of %d, %s\tno share owned (intervals)\tto fully assigned (intervals)\ttasks done twice\ttasks\n",
		n, iv, rollingRuns, time.Now().UTC().Format("2006-01-02"))
	for i, ro := range rollouts {
		var unowned, assigned []float64
		twice, tasks, unsettled := 0, 0, 0
		for run := range rollingRuns {
			r := rollOnce(b, fmt.Sprintf("rolling-%d-%d", i, run), n, iv, ro)
			unowned = append(unowned, r.unowned)
			if r.settled {
				assigned = append(assigned, r.assigned)
			} else {
				unsettled++
			}
			twice += r.twice
			tasks += r.tasks
		}
		to := spread(assigned)
		if unsettled > 0 {
			to += fmt.Sprintf(", %d of %d not settled", unsettled, rollingRuns)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", ro.name, spread(unowned), to, twice, tasks)
	}
	for range b.N {
	}
}

// rollingRuns is how many times BenchmarkRollingUpdate runs each rollout.
const rollingRuns = 3

type rolled struct {
	unowned, assigned float64 // in intervals
	settled           bool
	twice, tasks      int
}

// rollOnce starts a fleet of n, lets tasks flow, rolls it with ro, and
// measures the rollout from the workers' records and the fenced sink.
func rollOnce(b *testing.B, group string, n int, iv time.Duration, ro rollout) rolled {
	f := newFleet(b, iv)
	f.group = group
	if ro.serve {
		f.extra = append(f.extra, envServe+"=1")
	}
	if ro.before {
		f.extra = append(f.extra, envStand+"=1")
	}
	var old []int
	for range n {
		old = append(old, f.startWith(f.interval, f.extra...))
	}
	f.waitWhole(n)
	const ids, each = 400, 6
	produced := f.produce(ids, each, 6*time.Second)
	time.Sleep(time.Second)
	start := mono()
	news := ro.step(f, old)
	for _, o := range old {
		<-f.procs[o].done
		delete(f.procs, o)
	}
	<-produced
	got := f.effects(ids * each)
	time.Sleep(4 * iv)
	end := mono()
	h, err := readHistory(f.dir)
	if err != nil {
		b.Fatal(err)
	}
	r := rolled{unowned: h.standDown(start, end).Seconds() / iv.Seconds(), tasks: ids * each}
	// Fully assigned: the new workers hold every share (with ServeToCap the
	// old ones hold theirs for a while after the rollout's start).
	settledAt, ok := h.of(news).settled(start, end, n, int64(2*iv))
	if ok {
		r.settled, r.assigned = true, float64(settledAt-start)/float64(iv)
	}
	for _, c := range got {
		if c > 1 {
			r.twice++
		}
	}
	for _, id := range news {
		f.term(id)
	}
	return r
}

// of is the history of the given workers only.
func (h *history) of(workers []int) *history {
	out := &history{starts: h.starts, dones: h.dones}
	for _, hd := range h.holds {
		if slices.Contains(workers, hd.worker) {
			out.holds = append(out.holds, hd)
		}
	}
	return out
}

// spread prints the median and range of xs.
func spread(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	sort.Float64s(xs)
	return fmt.Sprintf("%.2f (%.2f-%.2f)", xs[len(xs)/2], xs[0], xs[len(xs)-1])
}
