package tracing_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/natstest"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/tracing"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/nandi-go/nandi/transport/memory"
	"github.com/nandi-go/nandi/transport/natscore"
	"github.com/nandi-go/nandi/transport/natsjs"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nandi-go/nandi/transport/watermillsub"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	_ "github.com/twmb/franz-go/pkg/kversion"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var groups atomic.Int64

// traced runs one consumer with a traced handler over src, publishes one
// message under a producer span with publish (its headers carry the trace
// context), and returns the producer's span context and what the exporter
// recorded.
func traced(t *testing.T, src transport.Source, h consumer.Handler, publish func(key string, payload []byte, headers map[string]string)) (trace.SpanContext, []sdktrace.ReadOnlySpan) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	group := fmt.Sprintf("traced-%d", groups.Add(1))
	l, err := partition.New(server(t).Client(), partition.Options{Name: group, Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 8)
	wrapped := tracing.Handler(func(ctx context.Context, m *transport.Message) error {
		defer func() { done <- struct{}{} }()
		return h(ctx, m)
	}, tracing.Options{Group: group, TracerProvider: tp})
	c, err := consumer.New(l, src, wrapped, consumer.Options{MaxAttempts: 1, DeadLetter: func(context.Context, *transport.Message, error) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ret := make(chan error, 1)
	go func() { ret <- c.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-ret
		}
	}
	defer stop()
	if _, err := l.Next(ctx); err != nil {
		t.Fatal(err)
	}
	pctx, span := tp.Tracer("producer").Start(context.Background(), "produce")
	headers := map[string]string{}
	tracing.Inject(pctx, headers, tracing.Options{})
	span.End()
	publish("42", []byte("hello"), headers)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the message was not handled")
	}
	stop()
	return span.SpanContext(), exp.GetSpans().Snapshots()
}

// taskSpan finds the task's span and checks it is the producer's child
// with the term's attributes, named and described by OpenTelemetry's
// messaging semantic conventions (the names are semconv's own constants,
// so a misspelt key fails here).
func taskSpan(t *testing.T, parent trace.SpanContext, spans []sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	return taskSpanOf(t, parent, spans, "", "")
}

// taskSpanOf is taskSpan for a source of the given messaging system and
// destination ("" for any).
func taskSpanOf(t *testing.T, parent trace.SpanContext, spans []sdktrace.ReadOnlySpan, system, dest string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range spans {
		if !strings.HasPrefix(s.Name(), "process") {
			continue
		}
		if s.Parent().SpanID() != parent.SpanID() || s.SpanContext().TraceID() != parent.TraceID() {
			t.Fatalf("the task's span has parent %v in trace %v; want the producer's span %v in trace %v",
				s.Parent().SpanID(), s.SpanContext().TraceID(), parent.SpanID(), parent.TraceID())
		}
		if s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("span kind %v; want consumer", s.SpanKind())
		}
		got := map[string]string{}
		for _, a := range s.Attributes() {
			got[string(a.Key)] = a.Value.String()
		}
		for _, k := range []attribute.Key{
			semconv.MessagingSystemKey, semconv.MessagingDestinationNameKey, semconv.MessagingOperationTypeKey,
			semconv.MessagingOperationNameKey, semconv.MessagingConsumerGroupNameKey,
			semconv.MessagingDestinationPartitionIDKey, semconv.MessagingMessageBodySizeKey,
			tracing.AttrIndex, tracing.AttrReplicas, tracing.AttrToken, tracing.AttrKey,
		} {
			if _, ok := got[string(k)]; !ok {
				t.Errorf("the span has no %s: %v", k, got)
			}
		}
		for _, k := range []attribute.Key{"nandi.group", "nandi.shard", "nandi.position"} {
			if _, ok := got[string(k)]; ok {
				t.Errorf("the span still has %s, which semconv's names replace: %v", k, got)
			}
		}
		if got["nandi.key"] != "42" || got["nandi.replicas"] != "1" || got[string(semconv.MessagingOperationTypeKey)] != "process" ||
			got[string(semconv.MessagingMessageBodySizeKey)] != "5" || !strings.HasPrefix(got[string(semconv.MessagingConsumerGroupNameKey)], "traced-") {
			t.Errorf("attributes %v; want key 42, replicas 1, operation type process, body size 5, the group", got)
		}
		if system != "" && got[string(semconv.MessagingSystemKey)] != system {
			t.Errorf("messaging.system %q; want %q", got[string(semconv.MessagingSystemKey)], system)
		}
		if dest != "" && (got[string(semconv.MessagingDestinationNameKey)] != dest || s.Name() != "process "+dest) {
			t.Errorf("span %q with destination %q; want \"process %s\"", s.Name(), got[string(semconv.MessagingDestinationNameKey)], dest)
		}
		return s
	}
	t.Fatalf("no task span among %d spans", len(spans))
	return nil
}

var srv *redistest.Server

func server(t testing.TB) *redistest.Server {
	t.Helper()
	if srv == nil {
		srv = redistest.Start(t)
		t.Cleanup(func() { srv = nil })
	}
	return srv
}

func ok(context.Context, *transport.Message) error { return nil }

// A span per handled task, child of the producer's span whose context came
// in the message's headers, on every transport that carries headers.
func TestSpanPerTaskOnEveryTransport(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		log := memory.NewLog(2)
		parent, spans := traced(t, log.Source(), ok, func(k string, p []byte, h map[string]string) { log.AppendWithHeaders(k, p, h) })
		taskSpanOf(t, parent, spans, "memory", "")
	})
	t.Run("redisstream", func(t *testing.T) {
		c := server(t).Client()
		src, _ := redisstream.New(c, "traced", redisstream.Options{})
		parent, spans := traced(t, src, ok, func(k string, p []byte, h map[string]string) {
			vals := []any{"id", k, "payload", p}
			for f, v := range h {
				vals = append(vals, f, v)
			}
			if err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: "traced", Values: vals}).Err(); err != nil {
				t.Fatal(err)
			}
		})
		taskSpanOf(t, parent, spans, "redis", "traced")
	})
	t.Run("natscore", func(t *testing.T) {
		ns := natstest.Start(t)
		src, _ := natscore.New(ns.Conn(), "traced", natscore.Options{})
		parent, spans := traced(t, src, ok, func(k string, p []byte, h map[string]string) {
			m := nats.NewMsg("traced")
			m.Header.Set("id", k)
			for f, v := range h {
				m.Header[f] = []string{v}
			}
			m.Data = p
			// The subscription may still be opening: publish until handled.
			for range 3 {
				_ = ns.Conn().PublishMsg(m)
				_ = ns.Conn().Flush()
				time.Sleep(50 * time.Millisecond)
			}
		})
		taskSpanOf(t, parent, spans, "nats", "traced")
	})
	t.Run("natsjs", func(t *testing.T) {
		ns := natstest.Start(t)
		js, _ := jetstream.New(ns.Conn())
		if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.tasks"}}); err != nil {
			t.Fatal(err)
		}
		src, _ := natsjs.New(js, "T", natsjs.Options{})
		parent, spans := traced(t, src, ok, func(k string, p []byte, h map[string]string) {
			m := nats.NewMsg("t.tasks")
			m.Header.Set("id", k)
			for f, v := range h {
				m.Header[f] = []string{v}
			}
			m.Data = p
			if _, err := js.PublishMsg(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		})
		taskSpanOf(t, parent, spans, "nats", "T")
	})
	t.Run("kafkatopic", func(t *testing.T) {
		kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "traced"))
		if err != nil {
			t.Fatal(err)
		}
		defer kc.Close()
		src, err := kafkatopic.New(kc.ListenAddrs(), "traced", kafkatopic.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		tr := &kafka.Transport{}
		w := &kafka.Writer{Addr: kafka.TCP(kc.ListenAddrs()...), Topic: "traced", Balancer: &kafka.Hash{}, Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
		defer func() { _ = w.Close(); tr.CloseIdleConnections() }()
		parent, spans := traced(t, src, ok, func(k string, p []byte, h map[string]string) {
			m := kafka.Message{Key: []byte(k), Value: p}
			for f, v := range h {
				m.Headers = append(m.Headers, kafka.Header{Key: f, Value: []byte(v)})
			}
			if err := w.WriteMessages(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		})
		s := taskSpanOf(t, parent, spans, "kafka", "traced")
		for _, a := range s.Attributes() {
			if a.Key == semconv.MessagingKafkaOffsetKey {
				return
			}
		}
		t.Errorf("a Kafka task's span has no %s", semconv.MessagingKafkaOffsetKey)
	})
	t.Run("watermillsub", func(t *testing.T) {
		ps := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 16}, watermill.NopLogger{})
		defer ps.Close()
		src, _ := watermillsub.New(ps, "traced", watermillsub.Options{})
		parent, spans := traced(t, src, ok, func(k string, p []byte, h map[string]string) {
			m := message.NewMessage(watermill.NewUUID(), p)
			m.Metadata.Set("id", k)
			for f, v := range h {
				m.Metadata.Set(f, v)
			}
			for range 3 { // the subscription may still be opening
				_ = ps.Publish("traced", m.Copy())
				time.Sleep(50 * time.Millisecond)
			}
		})
		taskSpanOf(t, parent, spans, "watermill", "traced")
	})
}

// An error is recorded on the span, marked when it is permanent; a panic
// is recorded and still reaches the consumer's recovery.
func TestSpanRecordsErrorsAndPanics(t *testing.T) {
	log := memory.NewLog(1)
	parent, spans := traced(t, log.Source(), func(context.Context, *transport.Message) error {
		return consumer.Permanent(errors.New("no such customer"))
	}, func(k string, p []byte, h map[string]string) { log.AppendWithHeaders(k, p, h) })
	s := taskSpan(t, parent, spans)
	if s.Status().Code != codes.Error || len(s.Events()) == 0 {
		t.Errorf("status %v, events %v; want an error recorded", s.Status(), s.Events())
	}
	perm := false
	for _, a := range s.Attributes() {
		if a.Key == tracing.AttrPermanent && a.Value.AsBool() {
			perm = true
		}
	}
	if !perm {
		t.Error("a permanent error is not marked on the span")
	}

	log2 := memory.NewLog(1)
	parent, spans = traced(t, log2.Source(), func(context.Context, *transport.Message) error {
		panic("boom")
	}, func(k string, p []byte, h map[string]string) { log2.AppendWithHeaders(k, p, h) })
	s = taskSpan(t, parent, spans)
	if s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, "panicked: boom") {
		t.Errorf("status %v; want the panic recorded", s.Status())
	}
}

// The application's global propagator is honoured when Options has none:
// baggage set by a producer under a composite propagator reaches the
// handler's context.
func TestGlobalPropagatorIsHonoured(t *testing.T) {
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	defer otel.SetTextMapPropagator(prev)
	member, _ := baggage.NewMember("tenant", "acme")
	bag, _ := baggage.New(member)
	headers := map[string]string{}
	tracing.Inject(baggage.ContextWithBaggage(context.Background(), bag), headers, tracing.Options{})
	if headers["baggage"] != "tenant=acme" {
		t.Fatalf("Inject wrote %v; want the baggage header of the global propagator", headers)
	}
	var got string
	h := tracing.Handler(func(ctx context.Context, m *transport.Message) error {
		got = baggage.FromContext(ctx).Member("tenant").Value()
		return nil
	}, tracing.Options{})
	if err := h(context.Background(), &transport.Message{Key: "1", Headers: headers}); err != nil {
		t.Fatal(err)
	}
	if got != "acme" {
		t.Errorf("the handler saw baggage tenant=%q; want acme", got)
	}
}

// A failure is reported in the task's trace: OnErrorContext's context
// carries the task's span (so do the consumer's "task failing" lines,
// logged with the same context), a child of the producer's.
func TestFailureIsReportedInTheTaskTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	log := memory.NewLog(1)
	l, err := partition.New(server(t).Client(), partition.Options{Name: fmt.Sprintf("traced-%d", groups.Add(1)), Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	reported := make(chan trace.SpanContext, 1)
	h := tracing.Handler(func(context.Context, *transport.Message) error { return errors.New("smtp: 451") }, tracing.Options{TracerProvider: tp})
	c, err := consumer.New(l, log.Source(), h, consumer.Options{
		MaxAttempts: 1, DeadLetter: func(context.Context, *transport.Message, error) error { return nil },
		OnErrorContext: func(ctx context.Context, _ *transport.Message, _ int, _ error) {
			reported <- trace.SpanContextFromContext(ctx)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ret := make(chan error, 1)
	go func() { ret <- c.Run(ctx) }()
	defer func() { cancel(); <-ret }()
	pctx, span := tp.Tracer("producer").Start(context.Background(), "produce")
	headers := map[string]string{}
	tracing.Inject(pctx, headers, tracing.Options{Propagator: propagation.TraceContext{}})
	span.End()
	log.AppendWithHeaders("42", []byte("hello"), headers)
	var sc trace.SpanContext
	select {
	case sc = <-reported:
	case <-time.After(15 * time.Second):
		t.Fatal("the failure was not reported")
	}
	if sc.TraceID() != span.SpanContext().TraceID() || sc.SpanID() == span.SpanContext().SpanID() || !sc.IsValid() {
		t.Errorf("OnErrorContext's span %v in trace %v; want the task's span in the producer's trace %v", sc.SpanID(), sc.TraceID(), span.SpanContext().TraceID())
	}
}
