// Package tracing gives a consumer's tasks OpenTelemetry spans, for those
// who want them: nothing else in nandi imports OpenTelemetry.
//
// Handler wraps a consumer.Handler. Each call is one span (kind
// consumer, named "nandi.task GROUP") whose parent is the trace context
// the producer put in the message's headers (W3C Trace Context by default,
// Options.Propagator otherwise), so the task shows in the producer's trace.
// The span carries the group, the lease's index, replicas and token, the
// task's key, shard and position (AttrGroup ... AttrPosition), and the
// handler's context carries the span: the handler's own calls (SQL, HTTP,
// Redis) are its children. A returned error is recorded and sets the
// span's status; a permanent one (consumer.Permanent) also sets
// AttrPermanent; a panic is recorded as an event and the span ended
// before the panic goes on to the consumer, which recovers it. Headers
// come from every transport that carries them: Redis stream fields, NATS
// and JetStream headers, Kafka headers, Watermill metadata and
// memory.Log.AppendWithHeaders.
//
// Inject is the producer's side: it writes a context's trace context into
// a header map, for the message about to be published.
//
// A span is ended when the handler returns (or panics); a handler that
// never returns (overdue, see package consumer) leaves its span open. Wrap
// with Handler outermost, so that the span covers whatever other wrapping
// the handler has.
package tracing
