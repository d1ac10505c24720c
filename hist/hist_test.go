package hist

import (
	"testing"
	"time"
)

func TestSnapshotIsCumulative(t *testing.T) {
	var h H
	for _, d := range []time.Duration{100 * time.Microsecond, time.Millisecond, 3 * time.Millisecond, time.Minute} {
		h.Observe(d)
	}
	s := h.Snapshot()
	if s.Count != 4 || s.Sum != 100*time.Microsecond+time.Millisecond+3*time.Millisecond+time.Minute {
		t.Fatalf("count %d sum %v", s.Count, s.Sum)
	}
	want := map[time.Duration]uint64{250 * time.Microsecond: 1, time.Millisecond: 2, 2 * time.Millisecond: 2, 5 * time.Millisecond: 3, 30 * time.Second: 3}
	for i, b := range Bounds {
		if w, ok := want[b]; ok && s.Buckets[i] != w {
			t.Errorf("le %v: %d, want %d", b, s.Buckets[i], w)
		}
	}
}

func TestQuantileAndMean(t *testing.T) {
	var h H
	if s := h.Snapshot(); s.Quantile(0.5) != 0 || s.Mean() != 0 {
		t.Fatalf("empty: quantile %v, mean %v; want 0", s.Quantile(0.5), s.Mean())
	}
	for range 90 {
		h.Observe(300 * time.Microsecond) // bucket 500µs
	}
	for range 10 {
		h.Observe(3 * time.Second) // bucket 5s
	}
	s := h.Snapshot()
	for q, want := range map[float64]time.Duration{0: 500 * time.Microsecond, 0.5: 500 * time.Microsecond, 0.9: 500 * time.Microsecond, 0.91: 5 * time.Second, 1: 5 * time.Second} {
		if got := s.Quantile(q); got != want {
			t.Errorf("Quantile(%g) = %v; want %v", q, got, want)
		}
	}
	if want := (90*300*time.Microsecond + 10*3*time.Second) / 100; s.Mean() != want {
		t.Errorf("Mean = %v; want %v", s.Mean(), want)
	}
}
