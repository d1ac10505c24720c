package consumer

import (
	"golang.org/x/time/rate"
)

// groupShare is one worker's token bucket for a group limited to
// groupRate handler calls a second with a burst of groupBurst, split over
// replicas workers (nil: no limit). Each share is made afresh at each
// term, full: the lease guarantees that terms of different mappings never
// overlap, so the shares in force at any instant sum to groupRate.
func groupShare(groupRate float64, groupBurst, replicas int) *rate.Limiter {
	if groupRate <= 0 || replicas < 1 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(groupRate/float64(replicas)), max(1, groupBurst/replicas))
}

// admit waits until this worker's share of the group's rate lets one more
// handler call start. false: the term stopped taking meanwhile (the task
// is left, not done). The caller checks the start window after it.
func (a *attempts) admit() bool {
	if a.limiter == nil || a.limiter.Allow() {
		return true
	}
	a.sh.stats.rateWaits.Add(1)
	return a.limiter.Wait(a.taking) == nil
}
