package leasecheck

import (
	"fmt"
	"sort"
)

// Held is one worker's answer to Current() at one instant.
type Held struct {
	Worker          int
	Index, Replicas int
	OK              bool
}

// Exclusive returns a description of every violation in one sample: two
// workers holding one index, two values of replicas live, an index out of
// range.
func Exclusive(sample []Held) []string {
	var bad []string
	byIndex := map[int]int{}
	replicas := -1
	for _, h := range sample {
		if !h.OK {
			continue
		}
		if other, dup := byIndex[h.Index]; dup {
			bad = append(bad, fmt.Sprintf("workers %d and %d both hold index %d", other, h.Worker, h.Index))
		}
		byIndex[h.Index] = h.Worker
		if replicas >= 0 && replicas != h.Replicas {
			bad = append(bad, fmt.Sprintf("two values of replicas are live: %d and %d", replicas, h.Replicas))
		}
		replicas = h.Replicas
		if h.Index < 0 || h.Index >= h.Replicas {
			bad = append(bad, fmt.Sprintf("worker %d holds index %d of %d", h.Worker, h.Index, h.Replicas))
		}
	}
	return bad
}

// Complete is nil when the sample is a complete partition: n workers hold
// indexes 0..n-1 of n.
func Complete(sample []Held) error {
	seen := map[int]bool{}
	for _, h := range sample {
		if !h.OK {
			return fmt.Errorf("worker %d holds nothing; want a share of %d", h.Worker, len(sample))
		}
		if h.Replicas != len(sample) {
			return fmt.Errorf("worker %d holds %d of %d; want replicas %d", h.Worker, h.Index, h.Replicas, len(sample))
		}
		seen[h.Index] = true
	}
	if len(seen) != len(sample) {
		return fmt.Errorf("%d workers hold %d distinct indexes", len(sample), len(seen))
	}
	return nil
}

// Holding is one continuous holding of an assignment by one worker, from
// start to end (any clock, the same for all).
type Holding struct {
	Worker          int
	Index, Replicas int
	Start, End      int64
}

// Overlaps returns a description of every violation among holdings: two
// workers holding one index at once, or two values of replicas live at
// once. It sorts, so it serves tens of thousands of holdings (the
// pairwise check of a small simulation does not).
func Overlaps(hs []Holding) []string {
	var bad []string
	report := func(format string, args ...any) {
		if len(bad) < 20 {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	byStart := append([]Holding(nil), hs...)
	sort.Slice(byStart, func(i, j int) bool { return byStart[i].Start < byStart[j].Start })
	// One index, one holder at a time.
	last := map[int]Holding{}
	for _, h := range byStart {
		if h.End <= h.Start {
			continue
		}
		if p, ok := last[h.Index]; ok && p.Worker != h.Worker && h.Start < p.End {
			report("workers %d and %d both held index %d (of %d and %d) over [%d, %d)", p.Worker, h.Worker, h.Index, p.Replicas, h.Replicas, h.Start, min(p.End, h.End))
		}
		if p, ok := last[h.Index]; !ok || h.End > p.End {
			last[h.Index] = h
		}
	}
	// One replicas at a time: a sweep over starts and ends.
	type event struct {
		at       int64
		start    bool
		replicas int
		worker   int
	}
	var evs []event
	for _, h := range hs {
		if h.End > h.Start {
			evs = append(evs, event{h.Start, true, h.Replicas, h.Worker}, event{h.End, false, h.Replicas, h.Worker})
		}
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].at != evs[j].at {
			return evs[i].at < evs[j].at
		}
		return !evs[i].start && evs[j].start // ends first: [start, end) holdings
	})
	live := map[int]int{}
	for _, e := range evs {
		if !e.start {
			if live[e.replicas]--; live[e.replicas] == 0 {
				delete(live, e.replicas)
			}
			continue
		}
		for r := range live {
			if r != e.replicas {
				report("two values of replicas live at %d: %d and %d (worker %d)", e.at, r, e.replicas, e.worker)
			}
		}
		live[e.replicas]++
	}
	return bad
}
