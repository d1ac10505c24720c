// Package hist is a fixed-bucket histogram of durations, safe for
// concurrent use and free of allocation. partition.Stats and
// consumer.Stats carry its Snapshot (registration round trips, handler
// calls, drains), and package metrics exports them to Prometheus; a
// Snapshot can be read without Prometheus too:
//
//	st := c.Stats()
//	fmt.Println(st.Handling.Quantile(0.99), st.Handling.Count)
//
// # Lifecycle
//
// The zero H is ready; Observe adds a duration, Snapshot returns the
// counts so far. Neither allocates but Snapshot's two slices.
package hist
