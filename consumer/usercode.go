package consumer

import (
	"context"
	"reflect"
	"runtime/debug"
	"time"

	"github.com/nandi-go/nandi/internal/backoff"
	"github.com/nandi-go/nandi/internal/deadstream"
	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

// userCode is the user's functions as the consumer calls them, each
// wrapped once at New with the policies that apply to every call of it,
// one small function per policy, in the style of Watermill's middleware:
// a panic is recovered into a *PanicError and counted (recovering), a
// task's id falls back to its key (taskID), a failure is reported to
// OnErrorContext and OnError through one function (reportFailure), and
// RetryDelay falls back to the default backoff (retryDelay). What needs
// the scheduler (a retry that keeps its id's later tasks waiting, the
// group's rate, the lease's deadline) is the runner's and the term's.
type userCode struct {
	handler    Handler
	deadLetter func(ctx context.Context, m *transport.Message, cause error) error // nil: none (a lease without a Redis)
	discard    bool                                                               // DeadLetter is Discard: deadLetter is not called
	onError    func(ctx context.Context, m *transport.Message, attempt int, err error) error
	retryDelay func(attempt int, err error) time.Duration
	id         func(m *transport.Message) (uint64, error)
}

// wrap builds sh.user from h and sh.opts.
func (sh *shared) wrap(h Handler) {
	u := &sh.user
	u.handler = func(ctx context.Context, m *transport.Message) (err error) {
		defer sh.recovering(&err, "handler")
		return h(ctx, m)
	}
	dl := sh.opts.DeadLetter
	switch {
	case dl == nil && sh.client != nil:
		u.deadLetter = sh.defaultDeadLetter(sh.client)
	case dl != nil && reflect.ValueOf(dl).Pointer() == reflect.ValueOf(Discard).Pointer():
		u.discard = true
	case dl != nil:
		u.deadLetter = func(ctx context.Context, m *transport.Message, cause error) (err error) {
			defer sh.recovering(&err, "DeadLetter")
			return dl(ctx, m, cause)
		}
	}
	u.onError = sh.reportFailure(sh.opts.OnErrorContext, sh.opts.OnError)
	u.retryDelay = sh.defaultDelay(sh.opts.RetryDelay)
	u.id = sh.taskID(sh.opts.ID)
}

// defaultDeadLetter writes each letter to the group's dead-letter stream
// on c (deadletter.Stream), refusing past DefaultDeadLetterLimit letters.
func (sh *shared) defaultDeadLetter(c redis.Cmdable) func(context.Context, *transport.Message, error) error {
	stream := deadstream.Stream(sh.group)
	return func(ctx context.Context, m *transport.Message, cause error) error {
		f, _ := FailureFromContext(ctx)
		a, _ := AssignmentFromContext(ctx)
		facts := deadstream.Facts{Cause: cause, Attempts: f.Attempts, Worker: f.Worker, Index: a.Index, Replicas: a.Replicas, Token: a.Token,
			System: f.System, Source: f.Source, Shard: m.Shard, Position: m.Position}
		return deadstream.Add(ctx, c, stream, m, facts.Map(), deadstream.Bounds{Limit: DefaultDeadLetterLimit})
	}
}

// recovering turns a panic of the calling function into a *PanicError in
// *err, and counts it. It must be deferred directly.
func (sh *shared) recovering(err *error, what string) {
	v := recover()
	if v == nil {
		return
	}
	sh.stats.panics.Add(1)
	*err = &PanicError{Func: what, Value: v, Stack: debug.Stack()}
}

// reportFailure is OnErrorContext then OnError, as one function (nil when
// neither is set); it returns a panic of either, recovered.
func (sh *shared) reportFailure(withCtx func(context.Context, *transport.Message, int, error), plain func(*transport.Message, int, error)) func(context.Context, *transport.Message, int, error) error {
	if withCtx == nil && plain == nil {
		return nil
	}
	return func(ctx context.Context, m *transport.Message, attempt int, cause error) (err error) {
		defer sh.recovering(&err, "OnError")
		if withCtx != nil {
			withCtx(ctx, m, attempt, cause)
		}
		if plain != nil {
			plain(m, attempt, cause)
		}
		return nil
	}
}

// defaultDelay is the wait before the attempt after the attempt-th failed
// one: delay's (a negative one is 0), or backoff.Delay's between RetryMin
// and RetryMax (full jitter) when delay is nil or panics (recovered,
// counted and logged).
func (sh *shared) defaultDelay(delay func(int, error) time.Duration) func(int, error) time.Duration {
	fallback := func(attempt int) time.Duration {
		return backoff.Delay(attempt, sh.opts.RetryMin, sh.opts.RetryMax)
	}
	if delay == nil {
		return func(attempt int, _ error) time.Duration { return fallback(attempt) }
	}
	call := func(attempt int, cause error) (d time.Duration, err error) {
		defer sh.recovering(&err, "RetryDelay")
		return delay(attempt, cause), nil
	}
	return func(attempt int, cause error) time.Duration {
		d, err := call(attempt, cause)
		if err != nil {
			sh.log.Warn("RetryDelay panicked; using the default backoff", "err", err)
			return fallback(attempt)
		}
		return max(d, 0)
	}
}

// taskID is a message's task id: ID(m.Key), or Options.ID's (id). A
// message the source could not decode (Message.Err), or whose id cannot be
// had, is a permanent failure known at intake; it keeps its key's id so
// that it is reported in order.
func (sh *shared) taskID(id func(*transport.Message) (uint64, error)) func(*transport.Message) (uint64, error) {
	if id == nil {
		return func(m *transport.Message) (uint64, error) {
			if m.Err != nil {
				return ID(m.Key), Permanent(m.Err)
			}
			return ID(m.Key), nil
		}
	}
	call := func(m *transport.Message) (n uint64, err error) {
		defer sh.recovering(&err, "ID")
		return id(m)
	}
	return func(m *transport.Message) (uint64, error) {
		if m.Err != nil {
			return ID(m.Key), Permanent(m.Err)
		}
		n, err := call(m)
		if err != nil {
			return ID(m.Key), Permanent(err)
		}
		return n, nil
	}
}
