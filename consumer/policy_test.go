package consumer

import (
	"errors"
	"testing"
	"time"
)

// The failure policy only decides: a retry with RetryDelay's wait while
// attempts are left and the error is not permanent, then DeadLetter, or a
// skip when there is no DeadLetter; a failing DeadLetter is retried with a
// growing wait, never given up on.
func TestFailurePolicyDecides(t *testing.T) {
	delay := func(attempt int, err error) time.Duration { return time.Duration(attempt) * time.Second }
	boom := errors.New("boom")
	cases := []struct {
		name     string
		p        failurePolicy
		attempts int
		err      error
		next     result
		wait     time.Duration
	}{
		{"retry while attempts are left", failurePolicy{maxAttempts: 3, retryDelay: delay, deadLetter: true}, 2, boom, resRetry, 2 * time.Second},
		{"dead letter at the last attempt", failurePolicy{maxAttempts: 3, retryDelay: delay, deadLetter: true}, 3, boom, resDeadLetter, 0},
		{"skip at the last attempt without a DeadLetter", failurePolicy{maxAttempts: 3, retryDelay: delay}, 3, boom, resSkipped, 0},
		{"a permanent error is not retried", failurePolicy{maxAttempts: 3, retryDelay: delay, deadLetter: true}, 1, Permanent(boom), resDeadLetter, 0},
		{"no limit retries for ever", failurePolicy{retryDelay: delay, deadLetter: true}, 1000, boom, resRetry, 1000 * time.Second},
	}
	for _, c := range cases {
		next, wait := c.p.afterFailure(c.attempts, c.err)
		if next != c.next || wait != c.wait {
			t.Errorf("%s: %v after %v; want %v after %v", c.name, next, wait, c.next, c.wait)
		}
	}
	p := failurePolicy{retryMin: 10 * time.Millisecond, retryMax: time.Second}
	var last time.Duration
	for tries := 1; tries <= 20; tries++ {
		w := p.afterDeadLetterFailure(tries)
		if w <= 0 || w > p.retryMax {
			t.Fatalf("DeadLetter's %dth failure: wait %v; want in (0, %v]", tries, w, p.retryMax)
		}
		last = max(last, w)
	}
	if last < p.retryMax/4 {
		t.Errorf("DeadLetter's waits never grew past %v over 20 failures (RetryMax %v)", last, p.retryMax)
	}
}
