package hist

import (
	"fmt"
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

// MaxBounds is the most bounds a histogram of New can have.
const MaxBounds = 64

// H is a histogram over Bounds, or over the bounds given to New. The zero
// value is ready (over Bounds).
type H struct {
	bounds []time.Duration              // nil: Bounds
	counts [MaxBounds + 1]atomic.Uint64 // one per bound, and +Inf
	sum    atomic.Int64                 // nanoseconds
}

// New returns a histogram over bounds (ascending, positive, at most
// MaxBounds of them; nil or empty for Bounds). It panics on bounds that
// are not; ValidBounds says why first.
func New(bounds []time.Duration) *H {
	if err := ValidBounds(bounds); err != nil {
		panic(err)
	}
	h := &H{}
	if len(bounds) > 0 {
		h.bounds = append([]time.Duration(nil), bounds...)
	}
	return h
}

// ValidBounds returns an error that says what is wrong with bounds for
// New, nil when they will do.
func ValidBounds(bounds []time.Duration) error {
	if len(bounds) > MaxBounds {
		return fmt.Errorf("hist: %d bounds; at most %d", len(bounds), MaxBounds)
	}
	for i, b := range bounds {
		if b <= 0 || (i > 0 && b <= bounds[i-1]) {
			return fmt.Errorf("hist: bound %d is %v: bounds must be positive and ascending", i, b)
		}
	}
	return nil
}

func (h *H) bs() []time.Duration {
	if h.bounds == nil {
		return Bounds[:]
	}
	return h.bounds
}

// Observe adds one duration.
func (h *H) Observe(d time.Duration) {
	bounds := h.bs()
	i := 0
	for i < len(bounds) && d > bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// Snapshot is a histogram at one moment.
type Snapshot struct {
	Count   uint64          // durations observed
	Sum     time.Duration   // their sum
	Bounds  []time.Duration // upper bounds of the buckets
	Buckets []uint64        // cumulative counts, one per bound (le)
}

// Snapshot returns the counts so far.
func (h *H) Snapshot() Snapshot {
	bounds := h.bs()
	s := Snapshot{Sum: time.Duration(h.sum.Load()), Bounds: bounds, Buckets: make([]uint64, len(bounds))}
	var c uint64
	for i := range bounds {
		c += h.counts[i].Load()
		s.Buckets[i] = c
	}
	s.Count = c + h.counts[len(bounds)].Load()
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
