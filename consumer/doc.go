// Package consumer will pair a transport.Source with a partition.Lease and
// the filter id % replicas == index, with per-id ordering, bounded
// concurrency and exact handovers through package drain. Not built yet.
package consumer
