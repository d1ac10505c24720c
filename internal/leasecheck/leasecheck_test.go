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
