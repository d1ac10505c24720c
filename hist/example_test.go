package hist_test

import (
	"fmt"
	"time"

	"github.com/nandi-go/nandi/hist"
)

// A histogram of handler durations over buckets of your own: the count,
// the mean and a quantile (the upper bound of the bucket it falls in).
func Example() {
	h := hist.New([]time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, time.Second})
	for _, d := range []time.Duration{2 * time.Millisecond, 3 * time.Millisecond, 4 * time.Millisecond, 250 * time.Millisecond} {
		h.Observe(d)
	}
	s := h.Snapshot()
	fmt.Println("count:", s.Count)
	fmt.Println("mean:", s.Mean())
	fmt.Println("p50 at most:", s.Quantile(0.5))
	fmt.Println("p99 at most:", s.Quantile(0.99))
	// Output:
	// count: 4
	// mean: 64.75ms
	// p50 at most: 10ms
	// p99 at most: 1s
}
