package consumer

import (
	"sync"
	"sync/atomic"
	"time"
)

// spell tracks one kind of trouble (fetching, opening, writing
// checkpoints, tasks failing) so that it is logged once per spell: a Warn
// at the first failure and an Info when it ends, never one line per retry
// or per message, as the lease does for its registrations.
type spell struct {
	n     atomic.Int64 // failures in the current spell; 0 when there is none
	mu    sync.Mutex
	since time.Time
}

// fail counts a failure and reports whether it starts a spell (log it).
func (s *spell) fail() (first bool) {
	if s.n.Add(1) != 1 {
		return false
	}
	s.mu.Lock()
	s.since = time.Now()
	s.mu.Unlock()
	return true
}

// end ends the spell, if there is one, and returns how many failures it
// had and how long it lasted (log them); ok is false when there was none.
// Cheap when there is none: one atomic load.
func (s *spell) end() (failures int64, lasted time.Duration, ok bool) {
	if s.n.Load() == 0 {
		return 0, 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	failures = s.n.Swap(0)
	if failures == 0 {
		return 0, 0, false
	}
	return failures, time.Since(s.since), true
}
