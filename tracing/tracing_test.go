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
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
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
// with the term's attributes.
func taskSpan(t *testing.T, parent trace.SpanContext, spans []sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range spans {
		if !strings.HasPrefix(s.Name(), "nandi.task") {
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
		for _, k := range []string{"nandi.group", "nandi.index", "nandi.replicas", "nandi.token", "nandi.key", "nandi.shard", "nandi.position"} {
			if _, ok := got[k]; !ok {
				t.Errorf("the span has no %s: %v", k, got)
			}
		}
		if got["nandi.key"] != "42" || got["nandi.replicas"] != "1" {
			t.Errorf("attributes %v; want key 42, replicas 1", got)
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
		taskSpan(t, parent, spans)
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
		taskSpan(t, parent, spans)
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
		taskSpan(t, parent, spans)
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
		taskSpan(t, parent, spans)
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
		w := &kafka.Writer{Addr: kafka.TCP(kc.ListenAddrs()...), Topic: "traced", Balancer: &kafka.Hash{}, Transport: tr, BatchTimeout: time.Millisecond}
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
		taskSpan(t, parent, spans)
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
		taskSpan(t, parent, spans)
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
