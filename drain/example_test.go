package drain_test

import (
	"context"
	"fmt"
	"time"

	"github.com/nandi-go/nandi/drain"
)

func Example() {
	var g drain.Gate
	mapping := "0 of 3"
	work := func(d time.Duration) {
		if !g.Enter() {
			return // stopped: not ours to take now
		}
		go func() {
			defer g.Leave()
			time.Sleep(d)
		}()
	}
	work(10 * time.Millisecond)
	work(20 * time.Millisecond)

	// The mapping changes: stop taking, finish in flight by the deadline,
	// apply, resume.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := g.Handover(ctx, func() error {
		mapping = "1 of 4"
		return nil
	})
	fmt.Println(err, mapping, g.InFlight())
	// Output: <nil> 1 of 4 0
}
