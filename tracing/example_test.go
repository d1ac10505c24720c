package tracing_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/tracing"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A producer injects its trace context into the message's headers; the
// traced handler's span is its child, and the handler's context carries it.
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)) // yours would export to a collector

	outbox := memory.NewLog(1)
	ctx, span := tp.Tracer("shop").Start(context.Background(), "checkout")
	headers := map[string]string{}
	tracing.Inject(ctx, headers, tracing.Options{})
	outbox.AppendWithHeaders("42", []byte("order 42"), headers)
	span.End()

	lease, _ := partition.New(client, partition.Options{Name: "mail-sender", Interval: 100 * time.Millisecond})
	handled := make(chan struct{})
	send := tracing.Handler(func(ctx context.Context, m *transport.Message) error {
		close(handled)
		return nil
	}, tracing.Options{TracerProvider: tp}) // the group, system and destination come from the consumer
	c, _ := consumer.New(lease, outbox.Source(), send, consumer.Options{})
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	<-handled
	cancel()
	<-done

	for _, s := range exp.GetSpans().Snapshots() {
		if s.Name() == "process memory" { // "process tasks" for a Redis stream named tasks
			fmt.Println(s.Name(), "is a child of checkout:", s.Parent().SpanID() == span.SpanContext().SpanID())
			for _, a := range s.Attributes() {
				if a.Key == "messaging.consumer.group.name" || a.Key == "messaging.system" {
					fmt.Println(a.Key, "=", a.Value.String())
				}
			}
		}
	}
	_ = tp.Shutdown(context.Background())
	// Output:
	// process memory is a child of checkout: true
	// messaging.system = memory
	// messaging.consumer.group.name = mail-sender
}
