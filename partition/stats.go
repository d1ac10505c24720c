package partition

import (
	"errors"
	"sync"
	"time"

	"github.com/nandi-go/nandi/hist"
)

// Stats are a lease's counts since it was created, for monitoring (package
// metrics exports them to Prometheus). Durations are on the lease's clock.
type Stats struct {
	Running bool       // Run has started and not returned
	Held    bool       // a term is held at this instant
	Current Assignment // what is held (zero when Held is false)
	// HandingOver: the term held is being handed over (the mapping
	// changed; it is kept to its cap, Term.HandingOver).
	HandingOver bool

	Calls         int64 // registration calls answered (registered or not)
	Registrations int64 // calls the group counted: one per interval in a steady group
	Retries       int64 // calls that repeated a registration no answer had come for (a retry whose first attempt ran gets its answer, and counts nothing)
	Misses        int64 // calls that counted nothing: a new worker's first (a probe of the server's clock), or one answered outside the window
	Failures      int64 // calls that failed: network errors, timeouts, WAIT not acknowledged
	Refusals      int64 // calls refused because the group runs with other settings
	Acquired      int64 // terms begun

	// Lost counts ended terms by reason: "mapping_changed", "expired",
	// "generation_changed", "stopped".
	Lost map[string]int64

	HeldTime   time.Duration // total time a term was held
	UnheldTime time.Duration // total time Run ran holding nothing (joining, standing down)

	// Latency is the round trip of every answered call.
	Latency hist.Snapshot

	// LastAnswer is when the store last answered (host clock; zero before
	// the first answer), and Failing whether the calls since have failed.
	LastAnswer time.Time
	Failing    bool
}

// lostReasons are the Lost keys, in the order of the errors.
var lostReasons = []struct {
	err  error
	name string
}{
	{ErrMappingChanged, "mapping_changed"},
	{ErrExpired, "expired"},
	{ErrGenerationChanged, "generation_changed"},
	{ErrStopped, "stopped"},
}

// LostReasons are the keys of Stats.Lost.
func LostReasons() []string {
	out := make([]string, len(lostReasons))
	for i, r := range lostReasons {
		out[i] = r.name
	}
	return out
}

type leaseStats struct {
	mu                                                 sync.Mutex
	calls, registrations, failures, refusals, acquired int64
	retries, misses                                    int64
	lost                                               [4]int64
	held                                               time.Duration
	runStart, runEnd                                   time.Time // lease clock
	lastAnswer                                         time.Time // host clock
	failing                                            bool
	latency                                            hist.H
}

func (l *Lease) noteRun(start bool) {
	s := &l.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	if start {
		s.runStart = l.clock.Now()
	} else {
		s.runEnd = l.clock.Now()
	}
}

func (l *Lease) noteCall(res result, registered bool) {
	s := &l.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	var se *SettingsError
	switch {
	case res.err == nil:
		s.calls++
		if registered {
			s.registrations++
		}
		s.lastAnswer = l.clock.Host(res.recv)
		s.failing = false
	case errors.As(res.err, &se):
		s.refusals++
	default:
		s.failures++
		s.failing = true
	}
	if res.err == nil {
		s.latency.Observe(res.recv.Sub(res.sent))
	}
}

func (l *Lease) noteRetry() {
	l.stats.mu.Lock()
	l.stats.retries++
	l.stats.mu.Unlock()
}

func (l *Lease) noteMiss() {
	l.stats.mu.Lock()
	l.stats.misses++
	l.stats.mu.Unlock()
}

func (l *Lease) noteAcquired() {
	l.stats.mu.Lock()
	l.stats.acquired++
	l.stats.mu.Unlock()
}

func (l *Lease) noteEnded(t *Term, why error) {
	s := &l.stats
	end := l.clock.Now()
	if d := t.localDeadline(); d.Before(end) {
		end = d
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range lostReasons {
		if errors.Is(why, r.err) {
			s.lost[i]++
		}
	}
	if d := end.Sub(t.start); d > 0 {
		s.held += d
	}
}

// Stats returns the counts so far.
func (l *Lease) Stats() Stats {
	now := l.clock.Now()
	live := l.liveTerm()
	s := &l.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Stats{
		Calls: s.calls, Registrations: s.registrations, Retries: s.retries, Misses: s.misses,
		Failures: s.failures, Refusals: s.refusals, Acquired: s.acquired,
		Lost: map[string]int64{}, HeldTime: s.held, LastAnswer: s.lastAnswer, Failing: s.failing,
		Latency: s.latency.Snapshot(),
	}
	for i, r := range lostReasons {
		out.Lost[r.name] = s.lost[i]
	}
	if live != nil {
		end := now
		if d := live.localDeadline(); d.Before(end) {
			end = d
		}
		if d := end.Sub(live.start); d > 0 {
			out.HeldTime += d
		}
		if live.Held() {
			out.Held, out.Current, out.HandingOver = true, live.a, live.HandingOver()
		}
	}
	if !s.runStart.IsZero() {
		stop := now
		out.Running = s.runEnd.IsZero()
		if !out.Running {
			stop = s.runEnd
		}
		out.UnheldTime = max(stop.Sub(s.runStart)-out.HeldTime, 0)
	}
	return out
}
