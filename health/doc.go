// Package health reports a worker's lease to an orchestrator: an
// http.Handler for readiness (or liveness) probes.
//
//	mux.Handle("/ready", health.Handler(lease, health.Registering))
//	mux.Handle("/ready", health.ConsumerHandler(c, health.Registering)) // a worker running a consumer
//
// ConsumerHandler adds what only the consumer knows: a worker that holds an
// index it cannot serve (its checkpoints or its source will not open; the
// consumer retries while the term lasts) is not ready, so the fleet's
// readiness shows what its metrics (nandi_consumer_unserved) do.
//
// Choose the mode by what the probe does with the answer. A Kubernetes
// readiness probe that takes a pod out of a Service should usually use
// Registering: a worker that is joining or standing down is healthy, and
// taking it out of rotation helps nobody. Holding suits a dashboard or a
// probe that must know whether this worker does work right now; do not use
// it for a liveness probe, or every rebalance restarts the fleet.
package health
