// Package leasecheck checks the lease's invariants on one sample of a
// group, for the simulation, the integration tests and the benchmarks.
package leasecheck

import "fmt"

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
