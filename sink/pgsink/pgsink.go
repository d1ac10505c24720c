package pgsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/transport"
)

// Options configure a Sink.
type Options struct {
	// Group is the consumer group whose tasks the sink records (the
	// lease's Options.Name): required. Groups share the sink's tables.
	Group string
	// Schema holds the sink's tables, nandi_done, nandi_fence and
	// nandi_low (default "public"). New creates them if missing.
	Schema string
	// MaxBatch bounds how many tasks one transaction commits (default and
	// most 64): concurrent handlers' effects are committed together, each
	// in a savepoint of its own, and PostgreSQL caches 64 subtransactions
	// per transaction (past that, every snapshot on the server slows).
	MaxBatch int
	// BatchWindow is how long one batch's claim or effect may run before
	// the tasks queued behind it start a batch of their own (default
	// 10ms). Batches run their effects one at a time (two at once wait on
	// each other's rows and deadlock), so a slow effect holds only the
	// tasks of its batch, never the sink, and this is how long it holds
	// the next batch back.
	BatchWindow time.Duration
	// BatchTimeout bounds one transaction (default 10s); a batch that
	// takes longer fails, and each of its tasks with it (retried).
	BatchTimeout time.Duration
	// Checkpoints, when set to the group's checkpoint ledger (the
	// consumer's: checkpoint.NewRedis(client, group)), lets the sink
	// forget its record of done tasks below the group's low watermark,
	// which it copies into PostgreSQL (nandi_low) and answers from there:
	// a ledger lost later, which restarts reading below it, finds those
	// tasks done. Without it the sink keeps every record.
	Checkpoints checkpoint.Store
	// ForgetEvery is how often the sink raises its watermark and forgets
	// what lies below the one it raised the time before (default 10s). It
	// must be at least BatchTimeout, on every worker of the group: a claim
	// that started before a raise must have ended before the records
	// below it are forgotten.
	ForgetEvery time.Duration
	// Logger receives trouble at Warn; nil is silent.
	Logger *slog.Logger
}

// maxBatch is MaxBatch's bound: PostgreSQL's per-backend cache of
// subtransactions (PGPROC_MAX_CACHED_SUBXIDS).
const maxBatch = 64

// Stats counts what a Sink did, since New.
type Stats struct {
	Applied     int64 // tasks whose effect committed (with their record)
	AlreadyDone int64 // tasks found done before (by any worker, ever, or below the watermark): nothing applied
	Fenced      int64 // tasks refused because a newer term had claimed their key: nothing applied
	Failed      int64 // tasks whose effect (or record) failed: rolled back alone, the error returned to the consumer
	BatchErrors int64 // transactions that failed as a whole (a lost connection, the BatchTimeout): each task's error returned
	Commits     int64 // transactions committed
	Isolated    int64 // transactions refused at COMMIT (a deferred constraint), whose tasks were then run one per transaction
	Forgotten   int64 // records forgotten below the watermark
	Conflicts   int64 // tasks or transactions aborted by a deadlock or a serialization failure, and run again
}

// Sink applies each task's effect and records it as done in one
// PostgreSQL transaction: see the package documentation.
type Sink struct {
	pool  *pgxpool.Pool
	opts  Options
	log   *slog.Logger
	q     queries
	stats struct {
		applied, alreadyDone, fenced, failed, batchErrors, commits, isolated, forgotten, conflicts atomic.Int64
	}

	mu       sync.Mutex
	pending  []*request // tasks no batch has taken, in arrival order
	running  *batch     // the batch running claims and effects (nil: none)
	active   int        // batches running or committing, but for those that ran past BatchWindow
	parallel int        // at most this many active (two: one runs effects while the one before commits)

	forgetMu   sync.Mutex
	lastForget time.Time
	raised     map[int]position // the watermark raised the time before, per shard
}

// Func is a task's effect: it runs inside the transaction that records
// the task as done, and commits with it. Use tx for every statement:
// only what it does through tx is undone with a failed task, and an
// effect may run more than once (a transaction that does not commit runs
// again), so anything it does outside tx must bear repeating.
type Func func(ctx context.Context, tx pgx.Tx, m *transport.Message) error

// ErrNotInConsumer is returned by a Sink's handler called without a
// consumer's context: it needs the term's fencing token
// (consumer.AssignmentFromContext).
var ErrNotInConsumer = errors.New("pgsink: the handler's context carries no lease term: call it from a consumer")

// New returns a Sink for opts.Group on pool, creating its tables if they
// are missing. It never closes the pool.
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Sink, error) {
	if pool == nil {
		return nil, errors.New("pgsink: pool is nil")
	}
	if opts.Group == "" {
		return nil, errors.New("pgsink: Options.Group is empty: give the consumer group's name (the lease's Options.Name)")
	}
	if opts.MaxBatch < 0 || opts.BatchWindow < 0 || opts.BatchTimeout < 0 || opts.ForgetEvery < 0 {
		return nil, errors.New("pgsink: MaxBatch, BatchWindow, BatchTimeout and ForgetEvery must not be negative")
	}
	if opts.MaxBatch > maxBatch {
		return nil, fmt.Errorf("pgsink: Options.MaxBatch %d is above %d: each task of a batch has a savepoint, and past %d subtransactions PostgreSQL's snapshots slow down server-wide; use at most %d", opts.MaxBatch, maxBatch, maxBatch, maxBatch)
	}
	if opts.Schema == "" {
		opts.Schema = "public"
	}
	if opts.MaxBatch == 0 {
		opts.MaxBatch = maxBatch
	}
	if opts.BatchWindow == 0 {
		opts.BatchWindow = 10 * time.Millisecond
	}
	if opts.BatchTimeout == 0 {
		opts.BatchTimeout = 10 * time.Second
	}
	if opts.ForgetEvery == 0 {
		opts.ForgetEvery = max(10*time.Second, opts.BatchTimeout)
	}
	if opts.ForgetEvery < opts.BatchTimeout {
		return nil, fmt.Errorf("pgsink: Options.ForgetEvery (%v) is below Options.BatchTimeout (%v): a claim that started before a watermark was raised could outlive the records forgotten below it and apply its task again; set ForgetEvery at least BatchTimeout, on every worker of the group", opts.ForgetEvery, opts.BatchTimeout)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Sink{pool: pool, opts: opts, log: opts.Logger.With("group", opts.Group), q: newQueries(opts.Schema), raised: map[int]position{},
		parallel: min(2, int(pool.Config().MaxConns))}
	if _, err := pool.Exec(ctx, s.q.schema); err != nil {
		return nil, fmt.Errorf("pgsink: creating the tables in schema %s: %w", opts.Schema, err)
	}
	return s, nil
}

// Stats returns the counts so far.
func (s *Sink) Stats() Stats {
	return Stats{Applied: s.stats.applied.Load(), AlreadyDone: s.stats.alreadyDone.Load(), Fenced: s.stats.fenced.Load(),
		Failed: s.stats.failed.Load(), BatchErrors: s.stats.batchErrors.Load(), Commits: s.stats.commits.Load(),
		Isolated: s.stats.isolated.Load(), Forgotten: s.stats.forgotten.Load(), Conflicts: s.stats.conflicts.Load()}
}

// Handler returns a consumer.Handler that runs fn for each task in a
// transaction that also records the task as done. It commits only if the
// task was not done before (by any worker, ever, or below the watermark)
// and no newer term has claimed the task's key; otherwise it rolls back
// and returns nil (counted as AlreadyDone or Fenced). An error from fn
// rolls the task's effect back and is returned, to the consumer's
// failure policy. The source must be a log (its messages carry shards and
// positions: Redis Streams, Kafka, JetStream, the memory log).
func (s *Sink) Handler(fn Func) consumer.Handler {
	return func(ctx context.Context, m *transport.Message) error {
		a, ok := consumer.AssignmentFromContext(ctx)
		if !ok {
			return ErrNotInConsumer
		}
		return s.do(&request{ctx: ctx, m: m, fn: fn, token: a.Token, done: make(chan error, 1), promote: make(chan struct{}, 1)})
	}
}
