// Package leasecheck checks the lease's invariants on one sample of a
// group, for the simulation, the integration tests and the benchmarks.
package leasecheck
