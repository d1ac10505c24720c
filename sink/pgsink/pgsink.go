package pgsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	// MaxBatch bounds how many tasks one transaction commits (default
	// 64): concurrent handlers' effects are committed together.
	MaxBatch int
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
	// what lies below the one it raised the time before (default 10s).
	ForgetEvery time.Duration
	// Logger receives trouble at Warn; nil is silent.
	Logger *slog.Logger
}

// Stats counts what a Sink did, since New.
type Stats struct {
	Applied     int64 // tasks whose effect committed (with their record)
	AlreadyDone int64 // tasks found done before (by any worker, ever, or below the watermark): nothing applied
	Fenced      int64 // tasks refused because a newer term had claimed their key: nothing applied
	Failed      int64 // tasks whose fn failed: rolled back, the error returned to the consumer
	BatchErrors int64 // transactions that failed as a whole (a lost connection, a deadlock): each task's error returned
	Commits     int64 // transactions committed
	Forgotten   int64 // records forgotten below the watermark
	Conflicts   int64 // transactions aborted by a deadlock or a serialization failure, and run again
}

// Sink applies each task's effect and records it as done in one
// PostgreSQL transaction: see the package documentation.
type Sink struct {
	pool  *pgxpool.Pool
	opts  Options
	log   *slog.Logger
	q     queries
	stats struct {
		applied, alreadyDone, fenced, failed, batchErrors, commits, forgotten, conflicts atomic.Int64
	}

	mu      sync.Mutex
	pending []*request
	leading bool

	forgetMu   sync.Mutex
	lastForget time.Time
	raised     map[int]position // the watermark raised the time before, per shard
}

// Func is a task's effect: it runs inside the transaction that records
// the task as done, and commits with it. Use tx for every statement.
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
	if opts.MaxBatch < 0 || opts.BatchTimeout < 0 || opts.ForgetEvery < 0 {
		return nil, errors.New("pgsink: MaxBatch, BatchTimeout and ForgetEvery must not be negative")
	}
	if opts.Schema == "" {
		opts.Schema = "public"
	}
	if opts.MaxBatch == 0 {
		opts.MaxBatch = 64
	}
	if opts.BatchTimeout == 0 {
		opts.BatchTimeout = 10 * time.Second
	}
	if opts.ForgetEvery == 0 {
		opts.ForgetEvery = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Sink{pool: pool, opts: opts, log: opts.Logger.With("group", opts.Group), q: newQueries(opts.Schema), raised: map[int]position{}}
	if _, err := pool.Exec(ctx, s.q.schema); err != nil {
		return nil, fmt.Errorf("pgsink: creating the tables in schema %s: %w", opts.Schema, err)
	}
	return s, nil
}

// Stats returns the counts so far.
func (s *Sink) Stats() Stats {
	return Stats{Applied: s.stats.applied.Load(), AlreadyDone: s.stats.alreadyDone.Load(), Fenced: s.stats.fenced.Load(),
		Failed: s.stats.failed.Load(), BatchErrors: s.stats.batchErrors.Load(), Commits: s.stats.commits.Load(),
		Forgotten: s.stats.forgotten.Load(), Conflicts: s.stats.conflicts.Load()}
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
		r := &request{ctx: ctx, m: m, fn: fn, token: a.Token, done: make(chan error, 1), promote: make(chan struct{}, 1)}
		s.mu.Lock()
		s.pending = append(s.pending, r)
		lead := !s.leading
		s.leading = true
		s.mu.Unlock()
		for {
			if lead {
				s.lead(r)
			}
			select {
			case err := <-r.done:
				return err
			case <-r.promote:
				lead = true
			}
		}
	}
}

// request is one task waiting for a batch.
type request struct {
	ctx      context.Context
	m        *transport.Message
	fn       Func
	token    int64
	done     chan error    // its result, once
	promote  chan struct{} // it leads from now on
	skip     bool          // left out of a retried batch: its fn failed in the first
	finished bool          // its result is sent (set by the leader that sent it)
}

// lead runs batches of the pending requests, one transaction each, until
// own's is done: the handler that finds no batch running leads, the
// others wait for their batch (group commit, with no goroutine of the
// sink's own), and a leader whose task is done hands the lead to the
// first one still waiting, so that no handler call outlasts its own task
// by much.
func (s *Sink) lead(own *request) {
	for {
		s.mu.Lock()
		if own.finished {
			if len(s.pending) == 0 {
				s.leading = false
			} else {
				s.pending[0].promote <- struct{}{}
			}
			s.mu.Unlock()
			return
		}
		n := min(len(s.pending), s.opts.MaxBatch)
		batch := append([]*request(nil), s.pending[:n]...)
		s.pending = append(s.pending[:0], s.pending[n:]...)
		s.mu.Unlock()
		s.run(batch)
		s.forget()
	}
}

// finish sends r's result.
func (r *request) finish(err error) {
	r.finished = true
	r.done <- err
}

type outcome uint8

const (
	applied outcome = iota + 1
	alreadyDone
	fenced
	failed
)

// run commits one batch. A task whose fn fails aborts the transaction:
// the batch is rolled back and run again without it (its error is
// returned), so that the others still commit. An error of the batch as a
// whole (a lost connection) is every task's.
func (s *Sink) run(batch []*request) {
	conflicts := 0
	for {
		outs, errs, failedAt, err := s.try(batch)
		if err == nil && failedAt >= 0 && conflict(errs[failedAt]) {
			err, failedAt = errs[failedAt], -1 // the effect met the conflict: the batch's, not the task's
		}
		if err != nil && conflict(err) && conflicts < maxConflicts {
			// Another transaction held rows this batch's effects wanted
			// while wanting some of its own (two workers' batches updating
			// the same accounts in other orders): PostgreSQL aborted one.
			// Nothing of it committed: run it again, a little later.
			conflicts++
			s.stats.conflicts.Add(1)
			time.Sleep(time.Duration(rand.Int64N(int64(conflictWait) << conflicts)))
			continue
		}
		if err == nil && failedAt < 0 {
			for i, r := range batch {
				if r.skip {
					continue
				}
				switch outs[i] {
				case applied:
					s.stats.applied.Add(1)
				case alreadyDone:
					s.stats.alreadyDone.Add(1)
				case fenced:
					s.stats.fenced.Add(1)
				}
				r.finish(nil)
			}
			s.stats.commits.Add(1)
			return
		}
		if failedAt >= 0 { // fn of that task failed: it leaves the batch
			r := batch[failedAt]
			r.skip = true
			s.stats.failed.Add(1)
			r.finish(errs[failedAt])
			continue
		}
		s.stats.batchErrors.Add(1)
		s.log.Warn("batch failed; its tasks are retried", "tasks", len(batch), "err", err)
		for _, r := range batch {
			if !r.skip {
				r.finish(fmt.Errorf("pgsink: %w", err))
			}
		}
		return
	}
}

// maxConflicts is how many times a batch aborted by a deadlock or a
// serialization failure is run again before its tasks fail (and the
// consumer retries them); conflictWait the first wait's bound, doubling.
const (
	maxConflicts = 5
	conflictWait = 10 * time.Millisecond
)

// conflict reports whether err aborted the transaction for another's sake
// (deadlock_detected, serialization_failure): running it again may
// succeed.
func conflict(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// try runs the batch once: per task, claim its key and record it, then
// its fn. It returns each task's outcome, the index of a task whose fn
// failed (-1: none) with that error, and an error of the transaction.
func (s *Sink) try(batch []*request) (outs []outcome, errs []error, failedAt int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.BatchTimeout)
	defer cancel()
	outs, errs = make([]outcome, len(batch)), make([]error, len(batch))
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, nil, -1, err
	}
	defer func() {
		if err != nil || failedAt >= 0 {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	for i, r := range batch {
		if r.skip {
			continue
		}
		p := positionOf(r.m)
		var notFenced, recorded bool
		if err := tx.QueryRow(ctx, s.q.claim, s.opts.Group, r.m.Key, r.token, r.m.Shard, p.hi, p.lo).Scan(&notFenced, &recorded); err != nil {
			return nil, nil, -1, fmt.Errorf("claiming %s (shard %d, %v): %w", r.m.Key, r.m.Shard, r.m.Position, err)
		}
		switch {
		case !notFenced:
			outs[i] = fenced
			continue
		case !recorded:
			outs[i] = alreadyDone
			continue
		}
		// fn runs with the task's context values (its term) but not its
		// cancellation: the batch's statements run to its own deadline, and
		// a task whose term ends meanwhile is still safe (the fence row it
		// holds keeps any newer term's claim waiting until this commits).
		fctx, fcancel := context.WithDeadline(context.WithoutCancel(r.ctx), deadlineOf(ctx))
		ferr := callFn(fctx, tx, r)
		fcancel()
		if ferr != nil {
			errs[i] = ferr
			return outs, errs, i, nil
		}
		outs[i] = applied
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, -1, err
	}
	return outs, errs, -1, nil
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// callFn calls the task's fn, recovering a panic into an error (a failed
// task, as the consumer treats a handler's).
func callFn(ctx context.Context, tx pgx.Tx, r *request) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("pgsink: the effect of %s panicked: %v", r.m.Key, v)
		}
	}()
	return r.fn(ctx, tx, r.m)
}

// forget raises the watermark in PostgreSQL to the group's low watermark
// in its checkpoint ledger, and forgets the records below the watermark
// it raised the time before (at least ForgetEvery ago: no transaction
// that read the older one is still running, as none outlives
// BatchTimeout).
func (s *Sink) forget() {
	if s.opts.Checkpoints == nil {
		return
	}
	s.forgetMu.Lock()
	defer s.forgetMu.Unlock()
	if time.Since(s.lastForget) < s.opts.ForgetEvery {
		return
	}
	s.lastForget = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.BatchTimeout)
	defer cancel()
	for shard, below := range s.raised {
		tag, err := s.pool.Exec(ctx, s.q.forget, s.opts.Group, shard, below.hi, below.lo)
		if err != nil {
			s.log.Warn("forgetting done records failed; kept for the next time", "shard", shard, "err", err)
			continue
		}
		s.stats.forgotten.Add(tag.RowsAffected())
	}
	st, err := s.opts.Checkpoints.ReadLow(ctx)
	if err != nil || st.Current == nil {
		return
	}
	raised := map[int]position{}
	for shard := range st.Current.Start {
		low := encode(st.Current.Low(shard))
		if _, err := s.pool.Exec(ctx, s.q.raise, s.opts.Group, shard, low.hi, low.lo); err != nil {
			s.log.Warn("raising the watermark failed", "shard", shard, "err", err)
			continue
		}
		raised[shard] = low
	}
	s.raised = raised
}

// position is a transport.Position as two bigints that compare as it
// does: each half's top bit flipped (uint64 order as int64 order).
type position struct{ hi, lo int64 }

func encode(p transport.Position) position {
	return position{hi: int64(p.Hi ^ 1<<63), lo: int64(p.Lo ^ 1<<63)}
}

func positionOf(m *transport.Message) position { return encode(m.Position) }

// queries are the sink's statements on its schema.
type queries struct {
	schema, claim, raise, forget string
}

func newQueries(schema string) queries {
	id := pgx.Identifier{schema}.Sanitize()
	r := strings.NewReplacer("$S.", id+".")
	return queries{
		schema: r.Replace(`
CREATE TABLE IF NOT EXISTS $S.nandi_done (
  grp text NOT NULL, shard int NOT NULL, hi bigint NOT NULL, lo bigint NOT NULL,
  token bigint NOT NULL, at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (grp, shard, hi, lo));
CREATE TABLE IF NOT EXISTS $S.nandi_fence (
  grp text NOT NULL, key text NOT NULL, token bigint NOT NULL,
  PRIMARY KEY (grp, key));
CREATE TABLE IF NOT EXISTS $S.nandi_low (
  grp text NOT NULL, shard int NOT NULL, hi bigint NOT NULL, lo bigint NOT NULL,
  PRIMARY KEY (grp, shard));`),
		// One round trip per task: take the key's fence (a row lock held
		// to commit; refused when a newer token holds it), and record the
		// task as done unless it is below the watermark or recorded
		// already. fenced: not f; already done: f and not d.
		claim: r.Replace(`
WITH f AS (
  INSERT INTO $S.nandi_fence AS x (grp, key, token) VALUES ($1, $2, $3)
  ON CONFLICT (grp, key) DO UPDATE SET token = EXCLUDED.token WHERE x.token <= EXCLUDED.token
  RETURNING 1),
d AS (
  INSERT INTO $S.nandi_done (grp, shard, hi, lo, token)
  SELECT $1, $4, $5, $6, $3
  WHERE EXISTS (SELECT 1 FROM f)
    AND NOT EXISTS (SELECT 1 FROM $S.nandi_low w WHERE w.grp = $1 AND w.shard = $4 AND (w.hi, w.lo) > ($5, $6))
  ON CONFLICT DO NOTHING
  RETURNING 1)
SELECT EXISTS (SELECT 1 FROM f), EXISTS (SELECT 1 FROM d)`),
		raise: r.Replace(`
INSERT INTO $S.nandi_low AS w (grp, shard, hi, lo) VALUES ($1, $2, $3, $4)
ON CONFLICT (grp, shard) DO UPDATE SET hi = EXCLUDED.hi, lo = EXCLUDED.lo
WHERE (w.hi, w.lo) < (EXCLUDED.hi, EXCLUDED.lo)`),
		forget: r.Replace(`
DELETE FROM $S.nandi_done WHERE grp = $1 AND shard = $2 AND (hi, lo) < ($3, $4)`),
	}
}
