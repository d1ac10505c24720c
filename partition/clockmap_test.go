package partition

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// While both clocks run steadily the map keeps the tightest bound: the
// sample that spent least time in transit.
func TestClockMapKeepsTheFastestSample(t *testing.T) {
	m := clockMap{recent: 2 * time.Second, keep: 8 * time.Second, tolerance: time.Millisecond}
	t0 := time.Unix(1000, 0)
	const offset = 5 * time.Second // server time 0 is at local t0-offset
	for i, transit := range []time.Duration{3 * time.Millisecond, 500 * time.Microsecond, 2 * time.Millisecond} {
		sent := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		now := sent.Add(transit / 2).Sub(t0.Add(-offset)).Microseconds()
		m.add(sent, sent.Add(transit), now)
	}
	if got, want := m.best(m.keep), t0.Add(-offset).Add(-250*time.Microsecond); !got.Equal(want) {
		t.Fatalf("best base %v; want %v (the 0.5ms round trip's bound)", got.Sub(t0), want.Sub(t0))
	}
}

// The counterexample of issue 12 in small: when the server's clock steps
// forward, the older samples would map every server instant too late
// (registrations aimed past the window, deadlines too late), so they go.
// A step is seen once it exceeds the tolerance plus the round trips'
// uncertainty (here at most 1ms + 3ms).
func TestClockMapForgetsSamplesAfterTheServerStepsForward(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tol := time.Millisecond
		m := clockMap{recent: 2 * time.Second, keep: 8 * time.Second, tolerance: tol}
		t0 := time.Unix(1000, 0)
		base := t0.Add(-5 * time.Second)
		n := rapid.IntRange(1, 20).Draw(t, "samples")
		for i := range n {
			sent := t0.Add(time.Duration(i) * 50 * time.Millisecond)
			transit := time.Duration(rapid.Int64Range(100, 3000).Draw(t, "transit_us")) * time.Microsecond
			m.add(sent, sent.Add(transit), sent.Add(transit/2).Sub(base).Microseconds())
		}
		step := time.Duration(rapid.Int64Range(5000, time.Second.Microseconds()).Draw(t, "step_us")) * time.Microsecond
		sent := t0.Add(time.Duration(n) * 50 * time.Millisecond)
		m.add(sent, sent.Add(time.Millisecond), sent.Add(500*time.Microsecond).Add(step).Sub(base).Microseconds())
		got := m.best(m.keep)
		if want := base.Add(-step).Add(-500 * time.Microsecond); !got.Equal(want) {
			t.Fatalf("after a step of %v, best base is %v; want %v (the new sample's)", step, got.Sub(base), want.Sub(base))
		}
	})
}

// Tokens grow with time, not with the interval's number: a group stopped
// and started again with another Interval (after its hash expired) gets
// larger tokens, whichever way the interval changed.
func TestTokensGrowAcrossAChangeOfInterval(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		iv1 := rapid.Int64Range(100_000, 60_000_000).Draw(t, "iv1_us")
		iv2 := rapid.Int64Range(100_000, 60_000_000).Draw(t, "iv2_us")
		t1 := rapid.Int64Range(1e15, 2e15).Draw(t, "t1_us")
		// The second term starts at least one of its intervals (and a
		// millisecond) after the first's interval began.
		t2 := t1 + iv2 + 1000 + rapid.Int64Range(0, 1e9).Draw(t, "later_us")
		a, b := token(t1/iv1, iv1), token(t2/iv2, iv2)
		if b <= a {
			t.Fatalf("token %d of a term at %d (interval %d) is not above %d of one at %d (interval %d)", b, t2, iv2, a, t1, iv1)
		}
		if n := t1 / iv1; token(n+1, iv1) <= token(n, iv1) {
			t.Fatalf("tokens of successive intervals do not grow")
		}
	})
}
