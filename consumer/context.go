package consumer

import (
	"context"

	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
)

type assignmentKey struct{}

// AssignmentFromContext returns the assignment a handler runs under: the
// term its task was taken in, with its fencing token. A handler (or
// DeadLetter) gets it from its own context, with no race against the lease
// moving on, which lease.Current() would have during a drain. Use the token
// to fence the task's effects where they are written, so that a worker
// that outlived its term cannot overwrite what the next holder did:
//
//	a, _ := consumer.AssignmentFromContext(ctx)
//	// SQL: UPDATE mails SET sent = true, token = $2 WHERE id = $1 AND token <= $2
//	// Redis: a script that refuses a write whose token is below the stored one
//
// ok is false for a context that does not come from a consumer.
func AssignmentFromContext(ctx context.Context) (partition.Assignment, bool) {
	a, ok := ctx.Value(assignmentKey{}).(partition.Assignment)
	return a, ok
}

func withAssignment(ctx context.Context, a partition.Assignment) context.Context {
	return context.WithValue(ctx, assignmentKey{}, a)
}

// ContextWithAssignment returns ctx carrying a, as the consumer's context
// for a handler does: for tests of handlers that read their term
// (AssignmentFromContext), and for sinks called outside a consumer.
func ContextWithAssignment(ctx context.Context, a partition.Assignment) context.Context {
	return withAssignment(ctx, a)
}

type originKey struct{}

// Origin is what a handler's context carries of where its task came from:
// the group (the lease's name) and the source as it described itself
// when the term began (transport.Info: its messaging system, its
// destinations, its shards). Package tracing names its spans from it.
type Origin struct {
	Group  string         // the lease's name
	Source transport.Info // the source as it described itself
}

// OriginFromContext returns the Origin of a handler's (or DeadLetter's,
// or OnErrorContext's) task; ok is false for a context that does not come
// from a consumer.
func OriginFromContext(ctx context.Context) (Origin, bool) {
	o, ok := ctx.Value(originKey{}).(*Origin)
	if !ok {
		return Origin{}, false
	}
	return *o, true
}

// withOrigin returns ctx carrying o, as the consumer's context for a
// handler does.
func withOrigin(ctx context.Context, o Origin) context.Context {
	return context.WithValue(ctx, originKey{}, &o)
}

type failureKey struct{}

// Failure is what Options.DeadLetter's context carries of the task that
// failed: how many times the handler failed on it (0 when the message
// never reached the handler: Message.Err, an ID error) and the worker
// that gave up on it (Consumer.Worker), and where the task came from:
// the source's system and the name of the task's shard (the stream,
// topic or subject; transport.Info.Destination), so that it can be put
// back there. The task's term is there too (AssignmentFromContext).
type Failure struct {
	Attempts int    // the handler's failed attempts on the task
	Worker   string // the worker that gave up on it (Consumer.Worker)
	System   string // the source's system (transport.Info.System): "redis", "kafka", "nats", ...
	Source   string // the task's stream, topic or subject (transport.Info.Destination); empty when the source names none
}

// FailureFromContext returns the Failure of a DeadLetter call's task.
func FailureFromContext(ctx context.Context) (Failure, bool) {
	f, ok := ctx.Value(failureKey{}).(Failure)
	return f, ok
}

func withFailure(ctx context.Context, f Failure) context.Context {
	return context.WithValue(ctx, failureKey{}, f)
}

type workerKey struct{}

// handlerCtx is the context a worker's handler calls get: the term's
// context, which it adds only the worker to.
type handlerCtx struct {
	context.Context
	w *worker
}

func (c *handlerCtx) Value(key any) any {
	if key == (workerKey{}) {
		return c.w
	}
	return c.Context.Value(key)
}

// SetTaskContext makes ctx, derived from a handler's context, the context
// the consumer reports the handler's current attempt with: the "task
// failing" log lines (with slog's Context forms, so that a handler of
// OpenTelemetry's slog bridge adds the trace to them), OnErrorContext and
// DeadLetter's logs. Package tracing calls it with its span's context, so
// that a failure is logged in the task's trace; a middleware of your own
// can do the same. It does nothing for a context that is not a handler's
// (or derived from one). Call it while the handler runs: a call from a
// goroutine that outlives the handler may be taken for the worker's next
// task.
func SetTaskContext(ctx context.Context) {
	if w, ok := ctx.Value(workerKey{}).(*worker); ok {
		w.taskCtx.Store(&ctx)
	}
}
