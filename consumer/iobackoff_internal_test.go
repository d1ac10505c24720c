package consumer

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// A fleet's tasks that failed together do not retry together: the waits
// the consumer gives the n-th failure spread over [RetryMin, RetryMin×2^n]
// (at most RetryMax), for task retries and for the consumer's own I/O.
func TestRetriesAreJittered(t *testing.T) {
	sh := &shared{opts: Options{RetryMin: 50 * time.Millisecond, RetryMax: 5 * time.Second}, log: slog.New(slog.DiscardHandler)}
	waits := map[time.Duration]bool{}
	for range 200 {
		d := sh.defaultDelay(nil)(3, errors.New("smtp: 451"))
		if d < 50*time.Millisecond || d > 400*time.Millisecond {
			t.Fatalf("the third failure's wait is %v; want within [50ms, 400ms]", d)
		}
		waits[d] = true
	}
	if len(waits) < 100 {
		t.Errorf("200 tasks failing a third time got %d distinct waits; want them spread (full jitter), not in lockstep", len(waits))
	}

	io := map[time.Duration]bool{}
	for range 200 {
		r := ioBackoff{spell: &trouble{}, count: new(atomic.Int64)}
		r.failed(context.Background(), slog.New(slog.DiscardHandler), "fetch failing", errors.New("down"))
		d := r.failed(context.Background(), slog.New(slog.DiscardHandler), "fetch failing", errors.New("down"))
		if d < retryFloor || d > 4*retryFloor {
			t.Fatalf("the second failed fetch waits %v; want within [%v, %v]", d, retryFloor, 4*retryFloor)
		}
		io[d] = true
	}
	if len(io) < 100 {
		t.Errorf("200 workers failing a second fetch got %d distinct waits; want them spread", len(io))
	}
}
