// Package backoff computes the wait before a retry: exponential, with full
// jitter, so that a fleet that failed together (a broker's blip) does not
// retry together.
//
// Every retry loop in nandi (the consumer's own I/O, a failed task's
// attempts, a Kafka partition reader) waits Delay(n, floor, ceiling) after
// its n-th failure in a row. The function is pure but for its random draw
// (math/rand/v2, safe from any goroutine) and has no state: a loop counts
// its failures and resets the count when it succeeds.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Delay returns the wait after the attempt-th failure in a row (1 for the
// first): a duration drawn uniformly from [floor, cap], where cap doubles
// with each failure from 2×floor up to ceiling ("full jitter" above a
// floor, so that floor keeps its meaning of the shortest wait). attempt
// below 1 counts as 1; floor <= 0 gives waits from 0; a ceiling below
// floor is floor.
func Delay(attempt int, floor, ceiling time.Duration) time.Duration {
	floor = max(floor, 0)
	ceiling = max(ceiling, floor)
	top := Cap(attempt, floor, ceiling)
	if top <= floor {
		return floor
	}
	return floor + rand.N(top-floor+1)
}

// Cap is the longest wait Delay can return after the attempt-th failure:
// floor×2^attempt, at most ceiling (and at least floor).
func Cap(attempt int, floor, ceiling time.Duration) time.Duration {
	floor = max(floor, 0)
	ceiling = max(ceiling, floor)
	if floor == 0 {
		return ceiling
	}
	attempt = max(attempt, 1)
	top := floor
	for i := 0; i < attempt && top < ceiling; i++ {
		top *= 2
	}
	return min(top, ceiling)
}
