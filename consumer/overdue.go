package consumer

import (
	"sync"
	"sync/atomic"
)

// lateReturns gathers the returns of a term's overdue handlers (those the
// drain went on without) into one log line, written when the last of them
// returns: a busy machine can leave dozens overdue at one change, and a
// line each hid everything else in the log.
type lateReturns struct {
	left atomic.Int64 // detached calls that have not returned (may dip below 0 before the drain adds them)
	mu   sync.Mutex
	keys []string // the first lateKeysShown keys
	n    int
	errs int
}

// lateKeysShown is how many keys the line names.
const lateKeysShown = 10

// detached adds n calls the drain went on without; true when they have
// all returned already (the caller logs).
func (l *lateReturns) detached(n int) bool { return n > 0 && l.left.Add(int64(n)) == 0 }

// returned records one overdue call's return; true when it was the last
// (the caller logs).
func (l *lateReturns) returned(key string, err error) bool {
	l.mu.Lock()
	l.n++
	if key != "" && len(l.keys) < lateKeysShown {
		l.keys = append(l.keys, key)
	}
	if err != nil {
		l.errs++
	}
	l.mu.Unlock()
	return l.left.Add(-1) == 0
}

// summary is what the line says.
func (l *lateReturns) summary() (n, errs int, keys []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n, l.errs, append([]string(nil), l.keys...)
}

// lateReturn takes a detached call off the overdue count and records its
// return (key "" for intake's own calls); the last one logs the term's
// line.
func (a *attempts) lateReturn(key string, err error) {
	a.sh.overdue.Add(-1)
	a.log.DebugContext(a.ctx, "overdue handler returned", "key", key, "err", err)
	if a.late.returned(key, err) {
		a.logLate()
	}
}

// logLate writes the one line for a term's overdue handlers.
func (a *attempts) logLate() {
	n, errs, keys := a.late.summary()
	a.log.WarnContext(a.ctx, "overdue handlers returned: every handler the drain went on without has returned", "count", n, "failed", errs, "keys", keys)
}
