package health

import (
	"fmt"
	"net/http"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
)

// Mode chooses when a worker reports ready.
type Mode int

// The zero Mode is Registering, the one to use for a readiness probe.
const (
	// Registering: ready while the lease runs and the store answered its
	// registrations within the last two intervals, held or not. The
	// default: a worker that holds nothing (joining, standing down, one
	// more than the group's size) is still a healthy member of the group.
	Registering Mode = iota
	// Holding: ready only while a term is held. Never a readiness probe of
	// a Deployment: a rollout would wait on every new pod holding a share,
	// which it gets only once the group has settled with it. For a
	// dashboard or an alert on who holds what.
	Holding
)

// Handler answers 200 when the lease is ready in mode, else 503, with a
// one-line text body that says why (for example "holding 2 of 5, token
// 5987429863" or "not ready: registrations failing since 3.2s").
func Handler(l *partition.Lease, mode Mode) http.Handler {
	return handler(func() (bool, string) { return Check(l, mode) })
}

// ConsumerHandler answers like Handler for the consumer's lease, and 503
// while the consumer holds a term it cannot serve (Stats.Unserved), in
// either mode.
func ConsumerHandler(c *consumer.Consumer, mode Mode) http.Handler {
	return handler(func() (bool, string) { return CheckConsumer(c, mode) })
}

// CheckConsumer reports whether the consumer is ready in mode, and why.
func CheckConsumer(c *consumer.Consumer, mode Mode) (bool, string) {
	ok, why := Check(c.Lease(), mode)
	if !ok {
		return ok, why
	}
	if s := c.Stats(); s.Unserved {
		return false, fmt.Sprintf("%s, but it cannot be served: opening its checkpoints or source fails (%d failures so far; retrying)", why, s.OpenFailures)
	}
	return ok, why
}

func handler(check func() (bool, string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		ok, why := check()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: "+why)
			return
		}
		fmt.Fprintln(w, why)
	})
}

// Check reports whether the lease is ready in mode, and why.
func Check(l *partition.Lease, mode Mode) (bool, string) {
	s := l.Stats()
	holding := ""
	if s.Held {
		holding = fmt.Sprintf("holding %d of %d, token %d", s.Current.Index, s.Current.Replicas, s.Current.Token)
	}
	switch {
	case !s.Running:
		return false, "the lease is not running"
	case mode == Holding && !s.Held:
		return false, "holding nothing (joining or standing down)"
	case mode == Holding:
		return true, holding
	}
	stale := 2 * l.Interval()
	switch {
	case s.LastAnswer.IsZero():
		return false, "no registration answered yet"
	case time.Since(s.LastAnswer) > stale:
		return false, fmt.Sprintf("no registration answered for %v (failing: %v)", time.Since(s.LastAnswer).Round(time.Millisecond), s.Failing)
	case s.Held:
		return true, holding
	}
	return true, "registering, holding nothing (joining or standing down)"
}
