package partition

import "time"

// clockMap maps server time to local time. A reply whose request was sent
// at local s carries the server time T, read no earlier than s, so server
// instant x is no earlier than local s + (x - T). Every sample gives such a
// bound, and the latest bound (the request that spent least time in transit)
// is the tightest.
//
// Deadlines use the samples of the last two intervals only, so that drift
// between the two clocks cannot accumulate into them. Aiming uses the
// samples of the last eight: a longer history finds a request closer to the
// fastest transit, so every worker aims with about the same bias and jitter
// is not doubled by the estimate. Aiming is never a safety matter.
type clockMap struct {
	samples   []clockSample
	recent    time.Duration // samples used for deadlines
	keep      time.Duration // samples used for aiming
	tolerance time.Duration // disagreement that counts as the server's clock moving forward
}

type clockSample struct {
	base time.Time // local time of server time 0
	recv time.Time
}

func (m *clockMap) add(sent, recv time.Time, now int64) {
	// The server read now between sent and recv, so the true base lies in
	// [sent-now, recv-now], and the best of the samples is at most the true
	// base while both clocks run steadily. A sample whose latest possible
	// base is before it means the server's clock has moved forward against
	// ours (a step, or drift): the older samples would aim registrations
	// late (past the window, missing interval after interval) and map
	// deadlines late. Keep only the new one.
	if len(m.samples) > 0 && recv.Add(-time.Duration(now)*time.Microsecond).Before(m.best(m.keep).Add(-m.tolerance)) {
		m.samples = m.samples[:0]
	}
	kept := m.samples[:0]
	for _, x := range m.samples {
		if recv.Sub(x.recv) < m.keep {
			kept = append(kept, x)
		}
	}
	m.samples = append(kept, clockSample{base: sent.Add(-time.Duration(now) * time.Microsecond), recv: recv})
}

func (m *clockMap) reset() { m.samples = m.samples[:0] }

// local returns the earliest local time at which the server's clock can
// read x, from recent samples: the mapping for deadlines.
func (m *clockMap) local(x int64) time.Time {
	return m.best(m.recent).Add(time.Duration(x) * time.Microsecond)
}

// aim returns the local time at which to send so that the fastest request
// would reach the server at x.
func (m *clockMap) aim(x int64) time.Time {
	return m.best(m.keep).Add(time.Duration(x) * time.Microsecond)
}

func (m *clockMap) best(within time.Duration) time.Time {
	newest := m.samples[len(m.samples)-1].recv
	best := m.samples[len(m.samples)-1].base
	for _, s := range m.samples {
		if newest.Sub(s.recv) < within && s.base.After(best) {
			best = s.base
		}
	}
	return best
}

// server returns the server time (µs) at local time t, as aim maps it.
func (m *clockMap) server(t time.Time) int64 {
	return t.Sub(m.best(m.keep)).Microseconds()
}
