package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// holding is one term of one worker, from its records.
type holding struct {
	worker          int
	index, replicas int
	token           int64
	start, end      int64
	prov            bool   // provisional at its start: fenced by the ledger, not by time
	from            record // the acq record, for reports
}

// history is everything the workers recorded.
type history struct {
	holds  []holding
	starts []record
	dones  []record
}

func readHistory(dir string) (*history, error) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	h := &history{}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		open := map[int64]*holding{} // by token, per file (one worker)
		var order []*holding
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var r record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				continue // a line cut by kill -9
			}
			switch r.Kind {
			case "acq":
				hd := &holding{worker: r.Worker, index: r.Index, replicas: r.Replicas, token: r.Token, start: r.At, end: r.Deadline, prov: r.Prov, from: r}
				open[r.Token] = hd
				order = append(order, hd)
			case "renew":
				if hd := open[r.Token]; hd != nil && r.Deadline > hd.end {
					hd.end = r.Deadline
				}
			case "end":
				if hd := open[r.Token]; hd != nil && r.At < hd.end {
					hd.end = r.At
				}
			case "start":
				h.starts = append(h.starts, r)
			case "done":
				h.dones = append(h.dones, r)
			}
		}
		_ = f.Close()
		for _, hd := range order {
			h.holds = append(h.holds, *hd)
		}
	}
	return h, nil
}

func (hd holding) String() string {
	return fmt.Sprintf("worker %d held %d of %d (token %d) from %.3fs to %.3fs", hd.worker, hd.index, hd.replicas, hd.token, float64(hd.start)/1e9, float64(hd.end)/1e9)
}

// exclusive reports every pair of holdings of different workers that
// overlap in time with one index, or with two values of replicas; a
// provisional holding (the fenced handoff) is the ledger's to fence, not
// the lease's timing, and serving checks it instead.
func (h *history) exclusive() []string {
	var bad []string
	hs := append([]holding(nil), h.holds...)
	sort.Slice(hs, func(i, j int) bool { return hs[i].start < hs[j].start })
	for i, a := range hs {
		for _, b := range hs[i+1:] {
			if b.start >= a.end {
				continue
			}
			if a.worker == b.worker || a.prov || b.prov {
				continue
			}
			if a.replicas != b.replicas || a.index == b.index {
				bad = append(bad, fmt.Sprintf("%v overlaps %v", a, b))
			}
		}
	}
	return bad
}

// serving reports every pair of tasks run by different workers at once
// (from a start to its done, or to the end of its holding when no done
// came: a worker killed) under holdings of two values of replicas, or of
// one index: what the fenced handoff must never allow, whatever the
// lease's terms overlap.
func (h *history) serving() []string {
	type run struct {
		worker, id, seq int
		start, end      int64
		hd              holding
	}
	done := map[[3]int][]int64{}
	for _, d := range h.dones {
		k := [3]int{d.Worker, d.ID, d.Seq}
		done[k] = append(done[k], d.At)
	}
	var runs []run
	for _, s := range h.starts {
		var hd holding
		found := false
		for _, x := range h.holds {
			if x.worker == s.Worker && x.start <= s.At && s.At < x.end && uint64(s.ID)%uint64(x.replicas) == uint64(x.index) {
				hd, found = x, true
				break
			}
		}
		if !found {
			continue // owned reports it
		}
		end := hd.end
		for _, at := range done[[3]int{s.Worker, s.ID, s.Seq}] {
			if at >= s.At && at < end {
				end = at
			}
		}
		runs = append(runs, run{s.Worker, s.ID, s.Seq, s.At, end, hd})
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].start < runs[j].start })
	var bad []string
	for i, a := range runs {
		for _, b := range runs[i+1:] {
			if b.start >= a.end {
				break
			}
			if a.worker == b.worker {
				continue
			}
			if a.hd.replicas != b.hd.replicas || a.hd.index == b.hd.index {
				bad = append(bad, fmt.Sprintf("task %d/%d (worker %d, %d of %d) ran while task %d/%d (worker %d, %d of %d) did", a.id, a.seq, a.worker, a.hd.index, a.hd.replicas, b.id, b.seq, b.worker, b.hd.index, b.hd.replicas))
				if len(bad) > 20 {
					return bad
				}
			}
		}
	}
	return bad
}

// owned reports every task a worker started without holding a term that
// owned it at that moment.
func (h *history) owned() []string {
	var bad []string
	for _, s := range h.starts {
		ok := false
		for _, hd := range h.holds {
			if hd.worker == s.Worker && hd.start <= s.At && s.At < hd.end && uint64(s.ID)%uint64(hd.replicas) == uint64(hd.index) {
				ok = true
				break
			}
		}
		if !ok {
			bad = append(bad, fmt.Sprintf("worker %d started task %d/%d at %.3fs (lease said held=%v %d of %d) outside any holding that owned it", s.Worker, s.ID, s.Seq, float64(s.At)/1e9, s.Held, s.Index, s.Replicas))
		}
	}
	return bad
}

// effects counts the sink's accepted effects per task "id/seq".
func effects(list []string) map[string]int {
	out := map[string]int{}
	for _, e := range list {
		p := strings.Split(e, "/")
		if len(p) >= 2 {
			out[p[0]+"/"+p[1]]++
		}
	}
	return out
}

func taskKey(id, seq int) string { return strconv.Itoa(id) + "/" + strconv.Itoa(seq) }

// The checker itself: it must see an overlap, a task outside its holding,
// and nothing in a clean history.
func TestCheckerSeesWhatItMust(t *testing.T) {
	clean := &history{holds: []holding{
		{worker: 1, index: 0, replicas: 2, token: 10, start: 0, end: 100},
		{worker: 2, index: 1, replicas: 2, token: 10, start: 5, end: 100},
		{worker: 3, index: 0, replicas: 3, token: 12, start: 100, end: 200},
	}, starts: []record{{Worker: 1, ID: 4, At: 50}, {Worker: 3, ID: 3, At: 150}}}
	if bad := append(append(clean.exclusive(), clean.owned()...), clean.serving()...); len(bad) != 0 {
		t.Fatalf("a clean history reported: %v", bad)
	}
	dirty := &history{holds: []holding{
		{worker: 1, index: 0, replicas: 2, start: 0, end: 100},
		{worker: 2, index: 0, replicas: 2, start: 50, end: 150}, // same index at once
		{worker: 3, index: 1, replicas: 3, start: 99, end: 200}, // other replicas at once
	}, starts: []record{{Worker: 1, ID: 1, At: 50}, {Worker: 2, ID: 2, At: 160}}}
	if n := len(dirty.exclusive()); n != 3 {
		t.Errorf("exclusive found %d violations; want 3: %v", n, dirty.exclusive())
	}
	if n := len(dirty.owned()); n != 2 {
		t.Errorf("owned found %d violations; want 2 (a task not owned, a task after the holding): %v", n, dirty.owned())
	}
	// The fenced handoff: a provisional holding overlapping a kept one is
	// not the lease's violation; tasks of both mappings at once are.
	fenced := &history{holds: []holding{
		{worker: 1, index: 0, replicas: 2, token: 10, start: 0, end: 100},
		{worker: 2, index: 1, replicas: 3, token: 12, start: 60, end: 200, prov: true},
	}, starts: []record{{Worker: 1, ID: 2, Seq: 1, At: 50}, {Worker: 2, ID: 4, Seq: 1, At: 62}},
		dones: []record{{Worker: 1, ID: 2, Seq: 1, At: 65}, {Worker: 2, ID: 4, Seq: 1, At: 80}}}
	if bad := append(fenced.exclusive(), fenced.owned()...); len(bad) != 0 {
		t.Errorf("a provisional holding over a kept one reported: %v", bad)
	}
	if n := len(fenced.serving()); n != 1 {
		t.Errorf("serving found %d violations; want 1 (a task of 3 while one of 2 ran): %v", n, fenced.serving())
	}
	fenced.dones[0].At = 60
	if bad := fenced.serving(); len(bad) != 0 {
		t.Errorf("tasks of two mappings one after the other reported: %v", bad)
	}
}

// repeatedBefore lists the tasks done (an effect the sink accepted) more
// than once whose first accepted effect came before cut: work that was
// checkpointed, and so must not be done again.
func (h *history) repeatedBefore(cut int64) []string {
	first := map[[2]int]int64{}
	count := map[[2]int]int{}
	for _, d := range h.dones {
		if !d.Accepted {
			continue
		}
		k := [2]int{d.ID, d.Seq}
		if at, ok := first[k]; !ok || d.At < at {
			first[k] = d.At
		}
		count[k]++
	}
	var out []string
	for k, n := range count {
		if n > 1 && first[k] < cut {
			out = append(out, fmt.Sprintf("task %d/%d done %d times, first %v before the cut", k[0], k[1], n, time.Duration(cut-first[k]).Round(time.Millisecond)))
		}
	}
	sort.Strings(out)
	return out
}

// changes returns from, to and every start or end of a holding between
// them, in order: the moments at which what is held can change.
func (h *history) changes(from, to int64) []int64 {
	times := []int64{from, to}
	for _, hd := range h.holds {
		for _, x := range []int64{hd.start, hd.end} {
			if x > from && x < to {
				times = append(times, x)
			}
		}
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	return times
}

// settled reports the first moment in [at, until) from which every index
// of n is held (by holdings of a share of n) without a break for at least
// hold: the group has re-formed. It is at when the fault never broke it;
// false when no such stretch began before until.
func (h *history) settled(at, until int64, n int, hold int64) (int64, bool) {
	times := h.changes(at, until)
	whole := func(x int64) bool {
		idx := map[int]bool{}
		for _, hd := range h.holds {
			if hd.replicas == n && hd.start <= x && x < hd.end {
				idx[hd.index] = true
			}
		}
		return len(idx) == n
	}
	from := int64(-1)
	for i := 0; i+1 < len(times); i++ {
		a, b := times[i], times[i+1]
		if b == a {
			continue
		}
		if !whole(a + (b-a)/2) {
			from = -1
			continue
		}
		if from < 0 {
			from = a
		}
		if b-from >= hold {
			return from, true
		}
	}
	return 0, false
}

func TestSettledFindsTheFirstWholeStretch(t *testing.T) {
	h := &history{holds: []holding{
		{worker: 1, index: 0, replicas: 2, start: 0, end: 40},
		{worker: 2, index: 1, replicas: 2, start: 0, end: 10},
		{worker: 2, index: 1, replicas: 2, start: 15, end: 30},
		{worker: 2, index: 1, replicas: 2, start: 32, end: 40},
		{worker: 3, index: 0, replicas: 3, start: 12, end: 14}, // another count fills nothing
	}}
	if at, ok := h.settled(5, 40, 2, 10); !ok || at != 15 {
		t.Errorf("settled(5, 40, hold 10) = %d, %v; want 15 (whole 15..30 after the break 10..15)", at, ok)
	}
	if at, ok := h.settled(0, 40, 2, 5); !ok || at != 0 {
		t.Errorf("settled(0, 40, hold 5) = %d, %v; want 0 (whole 0..10)", at, ok)
	}
	if _, ok := h.settled(5, 40, 2, 20); ok {
		t.Error("settled(hold 20) reports a stretch; the longest is 15")
	}
}
