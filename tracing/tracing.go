package tracing

import (
	"context"
	"fmt"
	"strconv"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/transport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of nandi's tracer.
const ScopeName = "github.com/nandi-go/nandi/tracing"

// Options configure Handler and Inject. The zero value is usable: what a
// field leaves out comes from the consumer (consumer.OriginFromContext)
// and OpenTelemetry's globals.
type Options struct {
	// Group is the consumer's group (messaging.consumer.group.name).
	// Default: the lease's name, from the handler's context.
	Group string
	// System is the messaging system (messaging.system). Default: what
	// the source says (transport.Info.System: "redis", "kafka", "nats",
	// "watermill", "memory"); set it for a Watermill source to name the
	// broker under it.
	System string
	// Destination names what the task came from (messaging.destination.name,
	// and the span's name "process DESTINATION"). Default: the source's
	// name for the task's shard (transport.Info.Destination).
	Destination string
	// TracerProvider makes the tracer; default otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Propagator reads and writes the trace context in headers; default
	// otel.GetTextMapPropagator() (the application's: W3C Trace Context,
	// B3, baggage, as it set them), or W3C Trace Context when the
	// application set none.
	Propagator propagation.TextMapPropagator
}

func (o Options) withDefaults() Options {
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.Propagator == nil {
		o.Propagator = otel.GetTextMapPropagator()
		if len(o.Propagator.Fields()) == 0 { // none set: the global is a no-op
			o.Propagator = propagation.TraceContext{}
		}
	}
	return o
}

// Attribute keys of a task's span that are nandi's own; the rest follow
// OpenTelemetry's messaging semantic conventions (semconv: messaging.system,
// messaging.destination.name, messaging.destination.partition.id,
// messaging.consumer.group.name, messaging.operation.type and .name,
// messaging.message.id, messaging.message.body.size).
const (
	AttrIndex     = attribute.Key("nandi.index")    // the lease's index
	AttrReplicas  = attribute.Key("nandi.replicas") // the group's size in the term
	AttrToken     = attribute.Key("nandi.token")    // the term's fencing token
	AttrKey       = attribute.Key("nandi.key")      // the task's id, as the message carries it
	AttrPermanent = attribute.Key("nandi.permanent")
)

// Handler returns h traced: each call is a span of kind consumer named
// "process DESTINATION", child of the trace context in the message's
// headers, carried by the handler's context (and given to
// consumer.SetTaskContext, so that the consumer's log lines and
// OnErrorContext about a failure carry the trace).
func Handler(h consumer.Handler, opts Options) consumer.Handler {
	opts = opts.withDefaults()
	tracer := opts.TracerProvider.Tracer(ScopeName)
	return func(ctx context.Context, m *transport.Message) (err error) {
		if len(m.Headers) > 0 {
			ctx = opts.Propagator.Extract(ctx, propagation.MapCarrier(m.Headers))
		}
		o, _ := consumer.OriginFromContext(ctx)
		system, dest, group := opts.System, opts.Destination, opts.Group
		if system == "" {
			system = o.Source.System
		}
		if dest == "" {
			dest = o.Source.Destination(m.Shard)
		}
		if group == "" {
			group = o.Group
		}
		attrs := make([]attribute.KeyValue, 0, 12)
		attrs = append(attrs,
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingOperationName("process"),
			semconv.MessagingDestinationPartitionID(strconv.Itoa(m.Shard)),
			semconv.MessagingMessageBodySize(len(m.Payload)),
			AttrKey.String(m.Key),
		)
		if system != "" {
			attrs = append(attrs, semconv.MessagingSystemKey.String(system))
		}
		if dest != "" {
			attrs = append(attrs, semconv.MessagingDestinationName(dest))
		}
		if group != "" {
			attrs = append(attrs, semconv.MessagingConsumerGroupName(group))
		}
		if o.Source.Log {
			attrs = append(attrs, semconv.MessagingMessageID(m.Position.String()))
			if system == "kafka" {
				attrs = append(attrs, semconv.MessagingKafkaOffset(int(m.Position.Lo)))
			}
		}
		if a, ok := consumer.AssignmentFromContext(ctx); ok {
			attrs = append(attrs, AttrIndex.Int(a.Index), AttrReplicas.Int(a.Replicas), AttrToken.Int64(a.Token))
		}
		name := "process"
		if dest != "" {
			name += " " + dest
		}
		ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
		defer span.End()
		consumer.SetTaskContext(ctx)
		defer func() {
			if v := recover(); v != nil {
				span.AddEvent("panic", trace.WithAttributes(attribute.String("panic.value", fmt.Sprint(v))))
				span.SetStatus(codes.Error, fmt.Sprintf("handler panicked: %v", v))
				span.End()
				panic(v) // the consumer recovers it and applies its failure policy
			}
		}()
		err = h(ctx, m)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			span.SetAttributes(semconv.ErrorTypeKey.String(fmt.Sprintf("%T", err)))
			if consumer.IsPermanent(err) {
				span.SetAttributes(AttrPermanent.Bool(true))
			}
		}
		return err
	}
}

// Inject writes ctx's trace context into headers (traceparent and
// tracestate with W3C Trace Context; whatever the propagator writes
// otherwise), for a producer: put them in the message's headers (NATS,
// Kafka), fields (Redis streams) or metadata (Watermill).
func Inject(ctx context.Context, headers map[string]string, opts Options) {
	opts.withDefaults().Propagator.Inject(ctx, propagation.MapCarrier(headers))
}
