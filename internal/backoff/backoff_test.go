package backoff

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestDelayStaysWithinItsBounds: whatever the attempt and bounds, a wait
// is within [floor, Cap], and Cap never passes the ceiling.
func TestDelayStaysWithinItsBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		attempt := rapid.IntRange(-3, 100).Draw(t, "attempt")
		floor := time.Duration(rapid.Int64Range(-10, int64(time.Minute)).Draw(t, "floor"))
		ceiling := time.Duration(rapid.Int64Range(-10, int64(time.Hour)).Draw(t, "ceiling"))
		d, top := Delay(attempt, floor, ceiling), Cap(attempt, floor, ceiling)
		lo := max(floor, 0)
		if d < lo || d > top {
			t.Fatalf("Delay(%d, %v, %v) = %v, want within [%v, %v]", attempt, floor, ceiling, d, lo, top)
		}
		if top > max(ceiling, lo) {
			t.Fatalf("Cap(%d, %v, %v) = %v, past the ceiling", attempt, floor, ceiling, top)
		}
	})
}

// TestCapDoubles: the cap is 2×floor after the first failure and doubles
// up to the ceiling.
func TestCapDoubles(t *testing.T) {
	floor, ceiling := 50*time.Millisecond, 5*time.Second
	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000}
	for i, w := range want {
		if got := Cap(i+1, floor, ceiling); got != w*time.Millisecond {
			t.Errorf("Cap(%d) = %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
}

// TestDelayIsJittered: a fleet of 1,000 retrying its third failure at
// once spreads over the whole window, instead of retrying in lockstep.
func TestDelayIsJittered(t *testing.T) {
	floor, ceiling := 10*time.Millisecond, time.Second
	top := Cap(3, floor, ceiling)
	var buckets [10]int
	for range 1000 {
		d := Delay(3, floor, ceiling)
		buckets[min(int((d-floor)*10/(top-floor+1)), 9)]++
	}
	for i, n := range buckets {
		// Uniform: 100 per tenth on average; fewer than 40 in a tenth has
		// a probability far below 1e-9.
		if n < 40 {
			t.Fatalf("tenth %d of the window got %d of 1,000 waits: not spread (%v)", i, n, buckets)
		}
	}
}
