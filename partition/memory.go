package partition

import (
	"context"
	"fmt"
)

// MemoryGroup is a group's registrations held in memory, with the lease
// script's semantics (register.lua), on the process clock: under
// testing/synctest its leases run on fake time. It is for tests of code
// that holds leases (a consumer, a handler's use of its assignment);
// nandi's guarantees are proven against a real redis-server. The leases
// made on one MemoryGroup are one group.
type MemoryGroup struct{ st *memStore }

// NewMemoryGroup returns a group with no worker.
func NewMemoryGroup() *MemoryGroup { return &MemoryGroup{st: newMemStore()} }

// NewInMemory returns a lease of the group g, as New does on Redis. It
// has no Redis client: a consumer on it keeps no presence, pause or
// ledger beside the lease (give consumer.Options.Checkpoints one,
// checkpoint/memledger's for a log).
func NewInMemory(g *MemoryGroup, opts Options) (*Lease, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return newLease(&memLink{s: g.st, iv: opts.Interval.Microseconds(), ppm: gapPPM(opts.Gap)}, opts), nil
}

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
