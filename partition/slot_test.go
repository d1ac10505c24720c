package partition

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Slots stay inside the window and in the order of the indexes they were
// computed from, whatever counts a worker knows: the order of arrival is
// what hands out the next indexes.
func TestSlotsAreInTheWindowAndInIndexOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		iv := rapid.Int64Range(100_000, 60_000_000).Draw(t, "interval_us")
		ppm := rapid.Int64Range(1, 200_000).Draw(t, "gap_ppm")
		l := &Lease{iv: iv, lo: gapMicros(iv, ppm)}
		p := rapid.IntRange(0, 5000).Draw(t, "p")
		c := rapid.IntRange(1, 5000).Draw(t, "c")
		prev := int64(-1)
		for i := range max(p, c) + 2 {
			x := l.slot(i, p, c)
			if x < l.lo || x > l.aimEnd() {
				t.Fatalf("slot(%d, %d, %d) = %d, outside the aimed part of the window [%d, %d]", i, p, c, x, l.lo, l.aimEnd())
			}
			if x < prev {
				t.Fatalf("slot(%d, %d, %d) = %d is before slot(%d) = %d", i, p, c, x, i-1, prev)
			}
			prev = x
		}
		// The first index past the old count keeps a quarter of an old
		// slot's width from the last old slot.
		if p > 0 {
			width := float64(l.aimEnd()-l.lo) / float64(p)
			if d := float64(l.slot(p, p, c) - l.slot(p-1, p, c)); d < width/(2*float64(max(c-p+1, 2)))-1 {
				t.Fatalf("slot(%d) is %.0fµs after slot(%d); old slots are %.0fµs wide", p, d, p-1, width)
			}
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
