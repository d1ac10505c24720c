package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/hist"
	"github.com/nandi-go/nandi/transport"
)

// Options configure a Consumer. The zero value is usable.
type Options struct {
	// Concurrency is how many handlers run at once (default 1). Different
	// ids run in parallel; one id never runs twice at once, and its tasks
	// run in the order the source delivered them.
	Concurrency int

	// MinTaskTime (DrainTimeout before) is the least time every task has, from its start,
	// before the lease it started under can run out: intake and task starts
	// pause when less than this (and a millisecond) is left before the
	// lease's deadline, until the renewal comes. The renewing registration
	// is due Gap*Interval before the deadline, so with the default,
	// Gap*Interval, the pause begins just before each registration is sent
	// and lasts its round trip: no task starts in the instant a
	// registration may end the term. A longer MinTaskTime (at most half
	// the Interval) gives longer tasks room at the price of a longer pause
	// each interval; a shorter one lets tasks start during registrations.
	// At a change of mapping, tasks running have until the deadline;
	// tasks not started are left to the next holder. A handler still
	// running at the deadline has its context cancelled and its task is
	// done again by the next holder.
	MinTaskTime time.Duration

	// ID returns a message's task id. Default: ID(m.Key). An error (or a
	// panic) makes the message a permanent failure (see ErrPermanent): it
	// goes to DeadLetter, never to the handler, and its owner is then
	// ID(m.Key), or on an aligned source (transport.Info.Aligned) the
	// index that reads its shard, m.Shard % Replicas: there is no id to
	// place it by.
	ID func(m *transport.Message) (uint64, error)

	// RetryMin and RetryMax bound the backoff between attempts of a failed
	// task. The wait after the n-th failure is drawn at random from
	// [RetryMin, min(RetryMax, RetryMin×2^n)] ("full jitter": tasks that
	// failed together, on every worker of a fleet, do not retry together);
	// RetryMin defaults to 50ms, RetryMax to 5s (or RetryMin when that is
	// longer). A task waiting to retry blocks its id only; no goroutine
	// waits with it, and a drain does not wait for it.
	RetryMin, RetryMax time.Duration

	// RetryDelay, if set, returns the wait before retrying a task whose
	// attempt-th attempt (1 for the first) failed with err, instead of the
	// jittered backoff between RetryMin and RetryMax (asynq's
	// RetryDelayFunc). A negative wait is 0; a panic is recovered, counted
	// (Stats.Panics) and the default backoff used. It is called from the
	// handler's goroutine; DeadLetter's own retries keep the default.
	RetryDelay func(attempt int, err error) time.Duration

	// MaxAttempts is the failure policy. 0 (the default): a failing task is
	// retried for as long as the lease is held, and blocks the later tasks
	// of its id (per-id order) but nothing else: other ids keep flowing
	// and keep being checkpointed. N > 0: after N failed attempts the task
	// goes to DeadLetter. Whatever MaxAttempts, a permanent failure
	// (ErrPermanent: Permanent, Message.Err, an ID error) goes to
	// DeadLetter at once. When DeadLetter returns nil the task is done;
	// otherwise DeadLetter itself is retried with the same backoff, the
	// task kept. DeadLetter's context carries the term
	// (AssignmentFromContext) and the Failure (FailureFromContext).
	//
	// Nothing is skipped by default: with DeadLetter nil, a dead letter is
	// written to the group's dead-letter stream on the lease's Redis,
	// {group}:dead (deadletter.Stream), where nandi dead list, show and
	// replay find it. That stream holds at most DefaultDeadLetterLimit
	// letters: past it a letter is refused (Stats.DeadLetterFailures,
	// nandi_consumer_dead_letter_failures_total, a Warn once per spell)
	// and retried with backoff, its task kept and its id waiting, until
	// letters are replayed or deleted; nothing is lost. Package deadletter
	// has the same writer with bounds of your choosing (RedisStream), and
	// writers for JetStream and Kafka; Discard drops permanent failures,
	// counted (Stats.Skipped) and each logged, when that is what you want.
	MaxAttempts int
	DeadLetter  func(ctx context.Context, m *transport.Message, err error) error

	// OnError, if set, is called after every failed attempt, from the
	// handler's goroutine; a panic in it is recovered and logged.
	OnError func(m *transport.Message, attempt int, err error)
	// OnErrorContext is OnError with the task's context: the handler's,
	// as the handler gave it to SetTaskContext (package tracing does, so
	// it carries the task's span), else the term's (with its assignment).
	// When both are set, OnErrorContext is called first.
	OnErrorContext func(ctx context.Context, m *transport.Message, attempt int, err error)

	// StartAtEnd makes a group with no checkpoints start at the end of the
	// log instead of its beginning (logs only).
	StartAtEnd bool

	// NoFencedHandoff hands a log's shares over at a change of the group
	// by the lease's timing alone, as before the fenced handoff (each
	// share unowned for about two intervals): for benchmarks that measure
	// the two side by side. Leave it false: with it, the group pauses at
	// every change (docs/figures.md).
	NoFencedHandoff bool

	// Checkpoints of a log are written every CheckpointInterval (default
	// 1s) or every CheckpointEvery finished tasks (default 1000), whichever
	// comes first but at most 100 times a second, and at every drain. They
	// are written by a goroutine of their own: intake never waits for them.
	CheckpointInterval time.Duration
	CheckpointEvery    int

	// DescribeInterval is how often a log is described again while a term
	// is served (default 10s), to find shards added since it was opened (a
	// Kafka topic given more partitions, a stream added to a sharded
	// source): the term then drains, writes its checkpoints and opens the
	// log again with them, reading the new shards from their start. Every
	// term describes the log when it opens it as well.
	DescribeInterval time.Duration

	// MaxPending bounds the owned tasks taken and not finished and held
	// whole: queued, running or waiting to retry (default 64 per unit of
	// Concurrency). Intake waits while that many are held, so memory stays
	// bounded whatever the handlers do.
	MaxPending int

	// MaxWaiting bounds the tasks held light: waiting behind an id whose
	// first task has failed, kept as their place in the log only (about
	// WaitingTaskBytes each, whatever their payload) and read again when
	// their turn comes, so that a failing id never stops the other ids
	// (default 100,000 per term: about 11 MB). It applies to logs that
	// can read entries again (transport.Rereader: every log transport of
	// nandi); on other sources those tasks are held whole, within
	// MaxPending. Past MaxWaiting they are held whole too.
	MaxWaiting int

	// ShutdownTimeout bounds the drain when Run's context ends (default
	// 30s); the lease is held and renewed meanwhile. Handlers still running
	// 100ms (or a tenth of it, if less) before it ends have their context
	// cancelled; those still running when it ends are left overdue, and
	// Run returns.
	ShutdownTimeout time.Duration

	// ServeToCap: when Run's context ends while a term is held, the worker
	// leaves the group cleanly instead of draining at once. It registers
	// no more and serves its term to its cap (partition.Lease.Leave: at
	// most two intervals away), drains there as at any term's end, and Run
	// returns. Its share is then served until the group's next mapping may
	// take it over, and goes unserved only for the drain and a gap and a
	// half, instead of about two intervals. It applies when ShutdownTimeout
	// is at least two intervals and MinTaskTime (else Run drains at once,
	// as without it); Run then returns within two intervals, MinTaskTime
	// and the last checkpoint write.
	ServeToCap bool

	// Checkpoints is where the checkpoints of a log are kept. Default: the
	// Redis ledger in the lease's store (checkpoint.NewRedis with the
	// lease's client and group name).
	Checkpoints checkpoint.Store

	// WorkerID names this worker in its presence record (package
	// presence; nandi status, watch and web show it). Default: the host
	// name (a Kubernetes pod's name) and the process id, host:pid, with #n
	// for the n-th consumer of a process.
	WorkerID string

	// NoPresence turns the presence record off. With it on (the default)
	// the worker writes its record once per lease interval, one pipelined
	// round trip to the lease's Redis, and it expires 3 intervals after
	// the last write; nothing in the lease or the consumer reads it.
	NoPresence bool

	// GroupRate limits the handler calls the whole group starts per
	// second, with no coordinator (0: no limit): each worker enforces its
	// share, GroupRate/Replicas, while it holds a lease, split again at
	// every change of mapping (a token bucket, golang.org/x/time/rate).
	// Since no two leases of different replicas overlap in time, the
	// group never starts more than GroupRate a second plus the bursts:
	// over any window of w seconds, at most GroupRate*w + GroupBurst
	// starts, and one worker's burst more for each lease taken within the
	// window (a worker's bucket starts full at each term). Every attempt
	// counts, retries too (an SMTP provider counts each send); dead
	// letters and permanent failures do not. A task waiting for its turn
	// holds its place: intake reads on only as far as MaxPending allows,
	// and a drain does not wait for the bucket (the task is left to the
	// next holder, not done). Stats.RateWaits counts the starts that
	// waited.
	GroupRate float64
	// GroupBurst is the group's burst: each worker's bucket holds
	// GroupBurst/Replicas starts, at least 1 (0: 1 per worker, starts
	// evenly spaced).
	GroupBurst int

	// HandlerBuckets are the upper bounds of the histogram of handler
	// durations (Stats.Handling, nandi_consumer_handler_duration_seconds):
	// ascending, at most hist.MaxBounds. Default hist.Bounds, 250µs to
	// 30s; handlers that take minutes want bounds of their own, say
	// {1s, 10s, 30s, time.Minute, 5 * time.Minute, 15 * time.Minute}.
	HandlerBuckets []time.Duration

	// Logger receives state changes at Info and trouble at Warn; nil is
	// silent.
	Logger *slog.Logger
}

// DefaultDeadLetterLimit is how many letters the default dead-letter
// stream (Options.DeadLetter nil) holds before it refuses more: the
// consumer then keeps the task and retries its letter with backoff.
const DefaultDeadLetterLimit = 100_000

// Discard is an Options.DeadLetter that drops the task: a permanent
// failure (or one past MaxAttempts) is then logged at Warn with its key,
// shard and position, counted (Stats.Skipped,
// nandi_consumer_messages_total{outcome="skipped"}) and gone. A consumer
// given it says so at Info once when it starts. Without it, nothing is
// dropped: see Options.MaxAttempts.
func Discard(context.Context, *transport.Message, error) error { return nil }

// DefaultDescribeInterval is Options.DescribeInterval's default.
const DefaultDescribeInterval = 10 * time.Second

// DefaultMaxWaiting is Options.MaxWaiting's default.
const DefaultMaxWaiting = 100_000

// WaitingTaskBytes is what a task waiting light costs in memory (its
// bookkeeping and its slot in its id's queue), whatever its payload.
const WaitingTaskBytes = 104

func (o Options) withDefaults(gapTime, _ time.Duration) Options {
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	if o.MinTaskTime == 0 {
		o.MinTaskTime = gapTime
	}
	if o.RetryMin == 0 {
		o.RetryMin = 50 * time.Millisecond
	}
	if o.RetryMax == 0 {
		o.RetryMax = max(5*time.Second, o.RetryMin)
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = time.Second
	}
	if o.CheckpointEvery == 0 {
		o.CheckpointEvery = 1000
	}
	if o.DescribeInterval == 0 {
		o.DescribeInterval = DefaultDescribeInterval
	}
	if o.MaxPending == 0 {
		o.MaxPending = 64 * o.Concurrency
	}
	if o.MaxWaiting == 0 {
		o.MaxWaiting = DefaultMaxWaiting
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

func (o Options) validate(gapTime, interval time.Duration) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...)
	}
	switch {
	case o.Concurrency < 1:
		return bad("Concurrency is %d; it must be at least 1", o.Concurrency)
	case o.MinTaskTime < 0 || o.MinTaskTime > interval/2:
		return bad("MinTaskTime is %v; it must be in (0, %v], half the lease's Interval (intake pauses for MinTaskTime-Gap*Interval every interval)", o.MinTaskTime, interval/2)
	case o.RetryMin < 0 || o.RetryMax < o.RetryMin:
		return bad("RetryMin %v and RetryMax %v: want 0 <= RetryMin <= RetryMax", o.RetryMin, o.RetryMax)
	case hist.ValidBounds(o.HandlerBuckets) != nil:
		return bad("HandlerBuckets: %v", hist.ValidBounds(o.HandlerBuckets))
	case o.MaxAttempts < 0:
		return bad("MaxAttempts is %d; use 0 to retry while the lease is held", o.MaxAttempts)
	case o.CheckpointInterval < 0 || o.CheckpointEvery < 0:
		return bad("CheckpointInterval %v and CheckpointEvery %d must not be negative", o.CheckpointInterval, o.CheckpointEvery)
	case o.DescribeInterval < 0:
		return bad("DescribeInterval is %v; it must not be negative", o.DescribeInterval)
	case o.MaxPending < 1:
		return bad("MaxPending is %d; it must be at least 1", o.MaxPending)
	case o.MaxWaiting < 0:
		return bad("MaxWaiting is %d; it must not be negative (0: %d)", o.MaxWaiting, DefaultMaxWaiting)
	case o.GroupRate < 0 || math.IsNaN(o.GroupRate) || math.IsInf(o.GroupRate, 0):
		return bad("GroupRate is %v; it must be a number of starts a second, 0 for no limit", o.GroupRate)
	case o.GroupBurst < 0:
		return bad("GroupBurst is %d; it must not be negative (0: 1 per worker)", o.GroupBurst)
	case o.ShutdownTimeout < 0:
		return bad("ShutdownTimeout is %v; it must not be negative", o.ShutdownTimeout)
	}
	return nil
}
