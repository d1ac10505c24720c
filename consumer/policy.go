package consumer

import (
	"time"

	"github.com/nandi-go/nandi/internal/backoff"
)

// failurePolicy is what a failed attempt leads to (Options.MaxAttempts,
// RetryDelay, DeadLetter, RetryMin and RetryMax): it decides and does
// nothing else. The attempt returns its decision and the book applies it
// (book.settle): a retry parks the task's id until the time it is due, a
// dead letter makes the task ready again with DeadLetter as what runs
// next, a skip finishes it.
type failurePolicy struct {
	maxAttempts        int                                        // 0: no limit
	retryDelay         func(attempt int, err error) time.Duration // RetryDelay, or the default backoff
	deadLetter         bool                                       // there is a DeadLetter to give tasks to (else they are skipped)
	retryMin, retryMax time.Duration                              // DeadLetter's own retries
}

// afterFailure decides what follows a task's attempts-th failed attempt,
// which failed with err: retry it after wait, send it to DeadLetter
// (resDeadLetter), or skip it (resSkipped; no DeadLetter).
func (p failurePolicy) afterFailure(attempts int, err error) (next result, wait time.Duration) {
	if !IsPermanent(err) && (p.maxAttempts == 0 || attempts < p.maxAttempts) {
		return resRetry, p.retryDelay(attempts, err)
	}
	if !p.deadLetter {
		return resSkipped, 0
	}
	return resDeadLetter, 0
}

// afterDeadLetterFailure is the wait before DeadLetter is called again for
// a task, after tries failures in a row: a failing DeadLetter is retried,
// never given up on, so the task is kept until it takes it.
func (p failurePolicy) afterDeadLetterFailure(tries int) time.Duration {
	return backoff.Delay(tries, p.retryMin, p.retryMax)
}
