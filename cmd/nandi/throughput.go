package main

import (
	"time"

	"github.com/nandi-go/nandi/presence"
)

// Minute is one minute of a group's work, as the page's chart shows it:
// the tasks its workers handled and the attempts that failed, from the
// counters each presence record carries (summed over the workers, the
// growth of each worker's counters between two polls; a worker that
// restarts starts its counters again, and its first record counts from
// there).
type Minute struct {
	At      time.Time `json:"at"` // the minute's start
	Handled int64     `json:"handled"`
	Failed  int64     `json:"failed"`
}

// chartMinutes is how many minutes the chart keeps: the last hour.
const chartMinutes = 60

// throughput turns the workers' cumulative counters into minutes.
type throughput struct {
	last    map[string][2]int64 // worker -> handled, failed at the last poll
	minutes []Minute            // oldest first, at most chartMinutes
}

// observe adds the growth of every worker's counters since the last poll
// to the minute of at.
func (tp *throughput) observe(at time.Time, workers []presence.Record) {
	minute := at.Truncate(time.Minute)
	if n := len(tp.minutes); n == 0 || tp.minutes[n-1].At.Before(minute) {
		tp.minutes = append(tp.minutes, Minute{At: minute})
		if len(tp.minutes) > chartMinutes {
			tp.minutes = tp.minutes[len(tp.minutes)-chartMinutes:]
		}
	}
	cur := &tp.minutes[len(tp.minutes)-1]
	next := make(map[string][2]int64, len(workers))
	for _, w := range workers {
		was, seen := tp.last[w.Worker]
		if seen && w.Handled >= was[0] && w.Failed >= was[1] {
			cur.Handled += w.Handled - was[0]
			cur.Failed += w.Failed - was[1]
		}
		next[w.Worker] = [2]int64{w.Handled, w.Failed}
	}
	tp.last = next
}

// chart returns the minutes kept, oldest first.
func (tp *throughput) chart() []Minute { return append([]Minute(nil), tp.minutes...) }
