package consumer

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nandi-go/nandi/internal/backoff"
)

// Retries of the consumer's own I/O (describing or opening the source,
// opening the ledger, fetching, reading waiting tasks again) back off with
// full jitter (backoff.Delay) from retryFloor, the window doubling, to
// retryCeiling: quick after a blip, about one try a second against a
// source that is down, and a fleet that failed together does not retry
// together.
const (
	retryFloor   = 10 * time.Millisecond
	retryCeiling = time.Second
)

// trouble tracks one kind of trouble (fetching, opening, writing
// checkpoints, dead letters, tasks failing) so that it is logged once per
// spell: a Warn at the first failure and an Info when it ends, never one
// line per retry or per message, as the lease does for its registrations.
type trouble struct {
	n     atomic.Int64 // failures in the current spell; 0 when there is none
	mu    sync.Mutex
	since time.Time
}

// fail counts a failure and reports whether it starts a spell (log it).
func (s *trouble) fail() (first bool) {
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
func (s *trouble) end() (failures int64, lasted time.Duration, ok bool) {
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

// ioBackoff is one loop's way of retrying the consumer's own I/O (not a task's retries: RetryDelay): every
// failure counted, the first of a spell logged, and the wait drawn by
// backoff.Delay between retryFloor and retryCeiling. The zero value is
// ready, with its spell and counter set.
type ioBackoff struct {
	spell *trouble
	count *atomic.Int64
	level slog.Level // of the spell's first failure (Warn when zero)
	tries int        // failures since the last success
}

// failed counts err, logs msg with it when it starts a spell, and returns
// how long to wait before the next try.
// ctx is the context of the work that failed (its trace goes with the
// log line).
func (r *ioBackoff) failed(ctx context.Context, log *slog.Logger, msg string, err error, attrs ...any) time.Duration {
	r.count.Add(1)
	if r.spell.fail() {
		level := r.level
		if level == 0 {
			level = slog.LevelWarn
		}
		log.Log(ctx, level, msg, append(attrs, "err", err)...)
	}
	r.tries++
	return backoff.Delay(r.tries, retryFloor, retryCeiling)
}

// wait is failed, then a sleep of that long; false when ctx ended first.
func (r *ioBackoff) wait(ctx context.Context, log *slog.Logger, msg string, err error, attrs ...any) bool {
	return sleep(ctx, r.failed(ctx, log, msg, err, attrs...))
}

// ok ends the backoff, and the spell with an Info line (msg, with its
// failures and how long it lasted) if there was one.
func (r *ioBackoff) ok(ctx context.Context, log *slog.Logger, msg string) {
	r.tries = 0
	if n, lasted, ok := r.spell.end(); ok {
		log.InfoContext(ctx, msg, "failures", n, "after", lasted)
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
