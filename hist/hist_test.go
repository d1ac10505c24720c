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
