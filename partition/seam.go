package partition

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/nandi-go/nandi/internal/leaseseam"
)

// The in-memory lease of nandi's own tests (internal/leaseseam): a group
// on a memStore, on the process clock.
func init() {
	leaseseam.Provide(func() any { return newMemStore() }, func(st, o any) (any, error) {
		opts := o.(Options).withDefaults()
		if err := opts.validate(); err != nil {
			return nil, err
		}
		s := st.(*memStore)
		return newLease(&memLink{s: s, iv: opts.Interval.Microseconds(), ppm: gapPPM(opts.Gap)}, opts), nil
	})
	leaseseam.ProvideStandDown(standDownAtChange.Store)
	leaseseam.ProvideFence(func(l any, on bool) { l.(*Lease).fenced.Store(on) })
}

// standDownAtChange: a registration that disagrees ends the term at once
// instead of keeping it to its cap (the rule before it was kept), for
// benchmarks that compare the two (leaseseam.StandDownAtChange).
var standDownAtChange atomic.Bool

// memLink is a worker's way to a memStore, with no faults.
type memLink struct {
	s       *memStore
	iv, ppm int64
}

func (k *memLink) register(ctx context.Context, c call) (reply, error) {
	if err := ctx.Err(); err != nil {
		return reply{}, fmt.Errorf("memstore: %w", err)
	}
	return k.s.exec(k.iv, k.ppm, c)
}
