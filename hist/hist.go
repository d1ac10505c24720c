package hist

import (
	"math"
	"sync/atomic"
	"time"
)

// Bounds are the upper bounds of the buckets: registration round trips and
// drains alike, from a local Redis to a slow cross-region link.
var Bounds = [...]time.Duration{
	250 * time.Microsecond, 500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond,
	5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second,
	2500 * time.Millisecond, 5 * time.Second, 10 * time.Second, 30 * time.Second,
}

// H is a histogram over Bounds. The zero value is ready.
type H struct {
	counts [len(Bounds) + 1]atomic.Uint64 // one per bound, and +Inf
	sum    atomic.Int64                   // nanoseconds
}

// Observe adds one duration.
func (h *H) Observe(d time.Duration) {
	i := 0
	for i < len(Bounds) && d > Bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// Snapshot is a histogram at one moment.
type Snapshot struct {
	Count   uint64
	Sum     time.Duration
	Bounds  []time.Duration // upper bounds of the buckets
	Buckets []uint64        // cumulative counts, one per bound (le)
}

// Snapshot returns the counts so far.
func (h *H) Snapshot() Snapshot {
	s := Snapshot{Sum: time.Duration(h.sum.Load()), Bounds: Bounds[:], Buckets: make([]uint64, len(Bounds))}
	var c uint64
	for i := range Bounds {
		c += h.counts[i].Load()
		s.Buckets[i] = c
	}
	s.Count = c + h.counts[len(Bounds)].Load()
	return s
}

// Quantile returns an upper bound of the q-quantile (0 <= q <= 1) of the
// durations observed: the upper bound of the first bucket that holds it
// (the largest bound when it lies beyond them), 0 when there is none.
func (s Snapshot) Quantile(q float64) time.Duration {
	if s.Count == 0 || len(s.Bounds) == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(s.Count)))
	rank = max(rank, 1)
	for i, c := range s.Buckets {
		if c >= rank {
			return s.Bounds[i]
		}
	}
	return s.Bounds[len(s.Bounds)-1]
}

// Mean returns the mean of the durations observed (0 when there is none).
func (s Snapshot) Mean() time.Duration {
	if s.Count == 0 {
		return 0
	}
	return s.Sum / time.Duration(s.Count)
}
