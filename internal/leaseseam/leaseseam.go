// Package leaseseam gives nandi's own tests a partition.Lease without
// Redis: on an in-memory registry with the lease script's semantics
// (partition's memStore, the model its own synctest tests run on), on the
// process clock, so that under testing/synctest a consumer runs on fake
// time. Package partition fills it in when it is loaded; the package
// importing partition asserts the types:
//
//	reg := leaseseam.NewRegistry()
//	l, err := leaseseam.NewLease(reg, partition.Options{Name: "g"})
//	lease := l.(*partition.Lease)
//
// The leases of one Registry are one group. Such a lease has no Redis
// client: a consumer on it has no presence, pause or ledger beside the
// lease. It is for tests of pure logic; the guarantees are proven against
// a real redis-server.
package leaseseam

import "sync/atomic"

// Registry is one group's registrations, in memory.
type Registry struct{ store any }

var (
	newStore func() any
	newLease func(store, opts any) (any, error)
)

// Provide is called by package partition with its constructors.
func Provide(store func() any, lease func(store, opts any) (any, error)) {
	newStore, newLease = store, lease
}

// NewRegistry returns an empty registry: a group with no worker.
func NewRegistry() *Registry {
	if newStore == nil {
		panic("leaseseam: package partition is not loaded; import it")
	}
	return &Registry{store: newStore()}
}

// NewLease returns a *partition.Lease (as any) for opts (a
// partition.Options) on r.
func NewLease(r *Registry, opts any) (any, error) { return newLease(r.store, opts) }

var standDown func(bool)

// ProvideStandDown is called by package partition with the switch below.
func ProvideStandDown(set func(bool)) { standDown = set }

// StandDownAtChange makes every lease in the process end its term at once
// at a registration that disagrees (ErrMappingChanged), as leases did
// before a term was kept to its cap through a change of mapping: for
// benchmarks that measure the two side by side. Switch it only while no
// lease runs.
func StandDownAtChange(on bool) {
	if standDown == nil {
		panic("leaseseam: package partition is not loaded; import it")
	}
	standDown(on)
}

var fence func(lease any, on bool)

// ProvideFence is called by package partition with the switch below.
func ProvideFence(set func(lease any, on bool)) { fence = set }

// Fence makes lease (a *partition.Lease) issue provisional terms at a
// change of count (the fenced handoff, docs/PROTOCOL.md): package
// consumer switches it on for a log with checkpoints, whose ledger fences
// each provisional term until the former holders released it. A lease
// whose user does not fence must never issue them.
func Fence(lease any, on bool) {
	if fence == nil {
		panic("leaseseam: package partition is not loaded; import it")
	}
	fence(lease, on)
}

// FenceOff, while true, keeps package consumer from switching on the
// fenced handoff (Fence): its terms are handed over by the lease's timing
// alone, as before the fence, for benchmarks that measure the two side by
// side. Switch it only while no consumer runs.
var FenceOff atomic.Bool
