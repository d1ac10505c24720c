package leasecheck

import "testing"

func TestExclusive(t *testing.T) {
	ok := []Held{{1, 0, 3, true}, {2, 1, 3, true}, {3, 2, 3, true}, {4, 0, 0, false}}
	if bad := Exclusive(ok); len(bad) != 0 {
		t.Errorf("Exclusive(%v) = %v; want none", ok, bad)
	}
	for _, sample := range [][]Held{
		{{1, 0, 3, true}, {2, 0, 3, true}},
		{{1, 0, 3, true}, {2, 1, 2, true}},
		{{1, 3, 3, true}},
	} {
		if bad := Exclusive(sample); len(bad) == 0 {
			t.Errorf("Exclusive(%v) found nothing; want a violation", sample)
		}
	}
}

func TestComplete(t *testing.T) {
	if err := Complete([]Held{{1, 1, 2, true}, {2, 0, 2, true}}); err != nil {
		t.Errorf("Complete: %v; want nil", err)
	}
	for _, sample := range [][]Held{
		{{1, 0, 2, true}, {2, 0, 0, false}},
		{{1, 0, 2, true}, {2, 0, 2, true}},
		{{1, 0, 3, true}, {2, 1, 3, true}},
	} {
		if err := Complete(sample); err == nil {
			t.Errorf("Complete(%v) = nil; want an error", sample)
		}
	}
}

// Overlaps finds what the pairwise check finds, agreeing with it on random
// holdings, and nothing in a clean history.
func TestOverlapsAgreesWithThePairwiseCheck(t *testing.T) {
	pairwise := func(hs []Holding) bool {
		for i, a := range hs {
			for _, b := range hs[i+1:] {
				if a.Worker == b.Worker || a.End <= a.Start || b.End <= b.Start || a.Start >= b.End || b.Start >= a.End {
					continue
				}
				if a.Index == b.Index || a.Replicas != b.Replicas {
					return true
				}
			}
		}
		return false
	}
	rnd := uint64(1)
	next := func(n int) int { rnd = rnd*6364136223846793005 + 1442695040888963407; return int(rnd>>33) % n }
	for range 5000 {
		var hs []Holding
		for w := range 1 + next(5) {
			at := int64(next(20))
			for range 1 + next(3) {
				end := at + 1 + int64(next(10))
				hs = append(hs, Holding{Worker: w, Index: next(3), Replicas: 2 + next(2), Start: at, End: end})
				at = end + int64(next(3))
			}
		}
		if got, want := len(Overlaps(hs)) > 0, pairwise(hs); got != want {
			t.Fatalf("Overlaps found a violation: %v, the pairwise check: %v, in %+v", got, want, hs)
		}
	}
}
