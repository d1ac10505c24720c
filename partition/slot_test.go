package partition

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Slots stay inside the window and in the order of their indexes, at most
// slotSpacing apart, and spread over the window when the group is large.
func TestSlotsAreInTheWindowAndInIndexOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		iv := rapid.Int64Range(100_000, 60_000_000).Draw(t, "interval_us")
		ppm := rapid.Int64Range(1, 200_000).Draw(t, "gap_ppm")
		l := &Lease{iv: iv, lo: gapMicros(iv, ppm)}
		p := rapid.IntRange(0, 20000).Draw(t, "p")
		prev := int64(-1)
		for i := range max(p, 1) + 2 {
			x := l.slot(i, p)
			if x < l.lo || x > l.aimEnd() {
				t.Fatalf("slot(%d, %d) = %d, outside the aimed part of the window [%d, %d]", i, p, x, l.lo, l.aimEnd())
			}
			if x < prev {
				t.Fatalf("slot(%d, %d) = %d is before slot(%d) = %d", i, p, x, i-1, prev)
			}
			if prev >= 0 && x-prev > slotSpacing+1 {
				t.Fatalf("slot(%d, %d) is %dµs after slot(%d); want at most %dµs", i, p, x-prev, i-1, slotSpacing)
			}
			prev = x
		}
	})
}

func TestSleepUntilNeverReturnsEarly(t *testing.T) {
	for i := range 50 {
		at := time.Now().Add(time.Duration(i*97) * time.Microsecond)
		sleepUntil(at)
		if now := time.Now(); now.Before(at) {
			t.Fatalf("sleepUntil returned %v before its time", at.Sub(now))
		}
	}
}
