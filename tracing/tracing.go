package tracing

import (
	"context"
	"fmt"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/transport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of nandi's tracer.
const ScopeName = "github.com/nandi-go/nandi/tracing"

// Options configure Handler and Inject. The zero value is usable.
type Options struct {
	// Group is the consumer's group, an attribute of every span and part
	// of its name.
	Group string
	// TracerProvider makes the tracer; default otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Propagator reads and writes the trace context in headers; default
	// W3C Trace Context (propagation.TraceContext).
	Propagator propagation.TextMapPropagator
}

func (o Options) withDefaults() Options {
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.Propagator == nil {
		o.Propagator = propagation.TraceContext{}
	}
	return o
}

// Attribute keys of a task's span.
const (
	AttrGroup     = attribute.Key("nandi.group")
	AttrIndex     = attribute.Key("nandi.index")
	AttrReplicas  = attribute.Key("nandi.replicas")
	AttrToken     = attribute.Key("nandi.token")
	AttrKey       = attribute.Key("nandi.key")
	AttrShard     = attribute.Key("nandi.shard")
	AttrPosition  = attribute.Key("nandi.position")
	AttrPermanent = attribute.Key("nandi.permanent")
)

// Handler returns h traced: each call is a span, child of the trace
// context in the message's headers, carried by the handler's context.
func Handler(h consumer.Handler, opts Options) consumer.Handler {
	opts = opts.withDefaults()
	tracer := opts.TracerProvider.Tracer(ScopeName)
	name := "nandi.task"
	if opts.Group != "" {
		name += " " + opts.Group
	}
	return func(ctx context.Context, m *transport.Message) (err error) {
		if len(m.Headers) > 0 {
			ctx = opts.Propagator.Extract(ctx, propagation.MapCarrier(m.Headers))
		}
		attrs := []attribute.KeyValue{
			AttrKey.String(m.Key),
			AttrShard.Int(m.Shard),
			AttrPosition.String(m.Position.String()),
		}
		if opts.Group != "" {
			attrs = append(attrs, AttrGroup.String(opts.Group))
		}
		if a, ok := consumer.AssignmentFromContext(ctx); ok {
			attrs = append(attrs, AttrIndex.Int(a.Index), AttrReplicas.Int(a.Replicas), AttrToken.Int64(a.Token))
		}
		ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
		defer span.End()
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
			if consumer.IsPermanent(err) {
				span.SetAttributes(AttrPermanent.Bool(true))
			}
		}
		return err
	}
}

// Inject writes ctx's trace context into headers (traceparent and
// tracestate with the default propagator), for a producer: put them in the
// message's headers (NATS, Kafka), fields (Redis streams) or metadata
// (Watermill).
func Inject(ctx context.Context, headers map[string]string, opts Options) {
	opts.withDefaults().Propagator.Inject(ctx, propagation.MapCarrier(headers))
}
