// Package tracing gives a consumer's tasks OpenTelemetry spans, for those
// who want them: nothing else in nandi imports OpenTelemetry.
//
// Handler wraps a consumer.Handler. Each call is one span of kind
// consumer, named and described by OpenTelemetry's messaging semantic
// conventions: "process DESTINATION" (the Redis stream, Kafka topic,
// JetStream stream, NATS subject or Watermill topic), with
// messaging.system, messaging.destination.name,
// messaging.destination.partition.id (the shard),
// messaging.consumer.group.name, messaging.operation.type "process",
// messaging.message.id (the position in a log; messaging.kafka.offset too
// on Kafka) and messaging.message.body.size, all from the consumer
// (consumer.OriginFromContext) unless Options names them; and nandi's own
// nandi.index, nandi.replicas, nandi.token (the term) and nandi.key (the
// task's id). Its parent is the trace context the producer put in the
// message's headers, read by the application's global propagator
// (otel.GetTextMapPropagator: W3C Trace Context, B3, baggage, as the
// application set them; W3C Trace Context when it set none) or
// Options.Propagator, so the task shows in the producer's trace. The
// handler's context carries the span: the handler's own calls (SQL, HTTP,
// Redis) are its children; and the consumer reports a failure with it
// (consumer.SetTaskContext): its "task failing" log lines, with an
// OpenTelemetry slog bridge, and OnErrorContext are in the task's trace.
// A returned error is recorded and sets the span's status and error.type;
// a permanent one (consumer.Permanent) also sets AttrPermanent; a panic is
// recorded as an event and the span ended before the panic goes on to the
// consumer, which recovers it. Headers come from every transport that
// carries them: Redis stream fields, NATS and JetStream headers, Kafka
// headers, Watermill metadata and memory.Log.AppendWithHeaders.
//
// Inject is the producer's side: it writes a context's trace context into
// a header map, for the message about to be published.
//
// A span is ended when the handler returns (or panics); a handler that
// never returns (overdue, see package consumer) leaves its span open. Wrap
// with Handler outermost, so that the span covers whatever other wrapping
// the handler has.
package tracing
