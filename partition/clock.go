package partition

import "time"

// A Clock is a worker's own clock as the lease reads it. The lease maps the
// store's clock onto it, takes every deadline on it, and times its sends by
// it; what it hands out (Term.Deadline, Term.Start, Term.Renewed) is
// converted back to the host's clock, so callers always compare with
// time.Now.
//
// The default, HostClock, is the host's monotonic clock, and is the only
// one a production worker should use. Another Clock lets a test reproduce a
// worker whose clock runs at another rate than the store's, the drift that
// the safety argument bounds: a worker whose clock runs slow by a fraction
// ρ stops up to about ρ times four intervals late (the oldest clock sample
// a deadline uses is two intervals old, and a deadline lies up to two
// intervals past it), which stays safe while that is well under
// Gap*Interval (ρ well under Gap/4: 3% for the default gap; a quartz clock
// drifts by about 0.01%, and NTP slews it by at most 0.05%).
type Clock interface {
	// Now reads the clock. Readings must carry a monotonic reading, as
	// time.Now's do, and never go back.
	Now() time.Time
	// Host returns the instant on the host's clock (time.Now's) at which
	// this clock reads t. Timers are set on it.
	Host(t time.Time) time.Time
}

// HostClock is the host's monotonic clock: Now is time.Now.
type HostClock struct{}

// Now is time.Now.
func (HostClock) Now() time.Time { return time.Now() }

// Host returns t.
func (HostClock) Host(t time.Time) time.Time { return t }
