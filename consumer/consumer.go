package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nandi-go/nandi/drain"
	"github.com/nandi-go/nandi/internal/hist"
	"github.com/nandi-go/nandi/internal/ledger"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
)

// Handler handles one task. Its context ends when the lease the task was
// taken under runs out (or at ShutdownTimeout); a handler must return
// promptly then, and must not act on the task after its context has ended.
// A nil error means the task is done; any other error is retried (see
// Options.MaxAttempts).
type Handler func(ctx context.Context, m *transport.Message) error

// Consumer pairs a source with a lease and the filter
// id % Replicas == Index. See the package documentation.
type Consumer struct {
	lease *partition.Lease
	src   transport.Source
	h     Handler
	opts  Options
	led   *ledger.Ledger
	log   *slog.Logger
	runs  atomic.Bool

	gate     drain.Gate
	slots    chan struct{} // MaxPending
	stats    stats
	drains   hist.H
	lastTrim time.Time // used by the intake goroutine only

	cur atomic.Pointer[term] // the term being served, for Positions
}

// New returns a Consumer of src for the holder of lease, handling with h.
// It validates opts (errors wrap ErrInvalidOptions) and does no I/O. The
// Consumer runs the lease itself: do not call lease.Run.
func New(lease *partition.Lease, src transport.Source, h Handler, opts Options) (*Consumer, error) {
	if lease == nil || src == nil || h == nil {
		return nil, fmt.Errorf("%w: lease, source and handler are all required", ErrInvalidOptions)
	}
	lo := lease.Options()
	gapTime := time.Duration(float64(lo.Interval) * lo.Gap)
	opts = opts.withDefaults(gapTime, lo.Interval)
	if err := opts.validate(gapTime, lo.Interval); err != nil {
		return nil, err
	}
	c := &Consumer{lease: lease, src: src, h: h, opts: opts, log: opts.Logger.With("group", lo.Name)}
	if cl := lease.Client(); cl != nil {
		c.led = ledger.New(cl, lo.Name)
	}
	c.slots = make(chan struct{}, opts.MaxPending)
	return c, nil
}

// Stats counts what a Consumer did. All counts are since New.
type Stats struct {
	Handled     int64 // tasks whose handler (or DeadLetter) succeeded
	NotOwned    int64 // messages skipped as another index's
	DoneBefore  int64 // messages skipped as finished by an earlier epoch
	Failed      int64 // failed attempts
	DeadLetters int64 // tasks given to DeadLetter successfully
	Abandoned   int64 // tasks not done when their lease ran out (done again by the next holder)
	Unowned     int64 // messages of a source that is not a log read while holding nothing: lost (NATS core)
	Checkpoints int64 // checkpoint writes
	Terms       int64 // terms served
	InFlight    int64 // handlers running now

	// Drains is how long each drain took: from stopping intake to the last
	// handler's return and the last checkpoint write (at every change of
	// mapping, and at shutdown).
	Drains hist.Snapshot
}

type stats struct {
	handled, notOwned, doneBefore, failed, deadLetters, abandoned, unowned, checkpoints, terms atomic.Int64
}

// Stats returns the counts so far.
func (c *Consumer) Stats() Stats {
	s := &c.stats
	return Stats{
		Handled: s.handled.Load(), NotOwned: s.notOwned.Load(), DoneBefore: s.doneBefore.Load(),
		Failed: s.failed.Load(), DeadLetters: s.deadLetters.Load(), Abandoned: s.abandoned.Load(),
		Unowned: s.unowned.Load(), Checkpoints: s.checkpoints.Load(), Terms: s.terms.Load(),
		InFlight: int64(c.gate.InFlight()), Drains: c.drains.Snapshot(),
	}
}

// Lease returns the lease the consumer runs.
func (c *Consumer) Lease() *partition.Lease { return c.lease }

// Source returns the source the consumer reads.
func (c *Consumer) Source() transport.Source { return c.src }

// Positions returns, for a log, the position per shard below which every
// task of the index held now is done (what the next checkpoint would
// write), and the assignment they belong to; ok is false when nothing is
// being served or the source is not a log. With the log's ends
// (Source.Info) it gives the lag per shard.
func (c *Consumer) Positions() (a partition.Assignment, pos []transport.Position, ok bool) {
	tr := c.cur.Load()
	if tr == nil {
		return a, nil, false
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.shards == nil {
		return a, nil, false
	}
	pos = make([]transport.Position, len(tr.shards))
	for i, sh := range tr.shards {
		pos[i] = sh.checkpoint()
	}
	return tr.a, pos, true
}

// ErrAlreadyRunning is returned by a second call of Run.
var ErrAlreadyRunning = errors.New("consumer: Run called twice")

// Run runs the lease and the consumer until ctx ends, then stops taking,
// drains the work in flight while the lease is still held (bounded by
// ShutdownTimeout), writes the last checkpoints and stops the lease; it
// returns nil then. It returns an error when the lease does (for example a
// group with other settings), or when the source cannot be described.
func (c *Consumer) Run(ctx context.Context) (runErr error) {
	if !c.runs.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	info, err := c.src.Info(ctx)
	if err != nil {
		return fmt.Errorf("consumer: describing the source: %w", err)
	}
	if info.Log && c.led == nil {
		return fmt.Errorf("consumer: the source is a log but the lease has no Redis client for its checkpoints")
	}
	if info.Shards < 1 {
		info.Shards = 1
	}

	leaseCtx, stopLease := context.WithCancel(context.WithoutCancel(ctx))
	leaseDone := make(chan error, 1)
	go func() { leaseDone <- c.lease.Run(leaseCtx) }()
	// The lease's own error (a group with other settings, say) is Run's,
	// however the loop below ended: it is read here, after the lease has
	// returned, so no race can lose it.
	defer func() {
		stopLease()
		if err := <-leaseDone; err != nil && runErr == nil {
			runErr = err
		}
	}()

	s := newSched(c.opts.Concurrency, c.run)
	defer s.close()

	var persistent transport.Reader // for a source that is not a log
	if !info.Log {
		if persistent, err = c.src.Open(ctx, nil); err != nil {
			return fmt.Errorf("consumer: opening the source: %w", err)
		}
		defer persistent.Close()
	}

	// Terms come one after another; a lease failure ends Run.
	watch, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		select {
		case err := <-leaseDone:
			leaseDone <- err // for the deferred wait
			stopWatch()
		case <-watch.Done():
		}
	}()
	for watch.Err() == nil {
		var t *partition.Term
		var err error
		if persistent != nil {
			t, err = c.discard(watch, persistent)
		} else {
			t, err = c.lease.Next(watch)
		}
		if err != nil {
			break
		}
		c.serve(ctx, watch, t, info, s, persistent)
		// Never take the next term before this one's deadline has passed
		// or the term has ended: Next would return the same term.
		select {
		case <-t.Done():
		case <-watch.Done():
		}
	}
	return nil
}

// discard reads a source that is not a log while this worker holds
// nothing, counting (and acknowledging) what it reads as Unowned, until a
// term is held. Leaving those messages in the subscription instead would
// have them handled later, under a mapping they did not arrive in, by a
// worker that may not have owned them when another one did.
func (c *Consumer) discard(ctx context.Context, r transport.Reader) (*partition.Term, error) {
	for {
		changed := c.lease.Changed()
		if t := c.lease.Term(); t != nil && t.Held() {
			return t, nil
		}
		fctx, cancel := context.WithCancel(ctx)
		stop := make(chan struct{})
		go func() {
			select {
			case <-changed:
				cancel()
			case <-stop:
			}
		}()
		ms, err := r.Fetch(fctx)
		close(stop)
		cancel()
		for _, m := range ms {
			c.stats.unowned.Add(1)
			if m.Ack != nil {
				m.Ack()
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			c.log.Warn("fetch failed", "err", err)
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
		}
	}
}

// term is one term being served.
type term struct {
	t      *partition.Term
	a      partition.Assignment
	ctx    context.Context // handlers'; ends when the lease runs out
	cancel context.CancelFunc

	st     *ledger.State // logs only
	mu     sync.Mutex
	shards []*shardTrack
	since  int // tasks finished since the last checkpoint write
	flush  chan struct{}
	bumped chan struct{} // closed and replaced at each renewal
}

// shardTrack knows, for one shard of a log, the position below which
// every task of this index is done: the first unfinished task taken, or
// the position after the last message read.
type shardTrack struct {
	next     transport.Position
	inflight []*task
	written  transport.Position
}

func (s *shardTrack) checkpoint() transport.Position {
	for len(s.inflight) > 0 && s.inflight[0].finished {
		s.inflight[0] = nil
		s.inflight = s.inflight[1:]
	}
	if len(s.inflight) > 0 {
		return s.inflight[0].m.Position
	}
	return s.next
}

type task struct {
	m        *transport.Message
	id       uint64
	idErr    error
	tr       *term
	finished bool // under tr.mu
}

// watch cancels the term's handler context when its deadline has passed
// with no renewal, and wakes every waiter at each renewal.
func (tr *term) watch() {
	timer := time.NewTimer(time.Until(tr.t.Deadline()))
	defer timer.Stop()
	for {
		select {
		case <-tr.ctx.Done():
			return
		case <-tr.t.Renewed():
			tr.mu.Lock()
			close(tr.bumped)
			tr.bumped = make(chan struct{})
			tr.mu.Unlock()
			timer.Reset(time.Until(tr.t.Deadline()))
		case <-timer.C:
			d := tr.t.Deadline()
			if !time.Now().Before(d) {
				tr.cancel()
				return
			}
			timer.Reset(time.Until(d))
		}
	}
}

// pauseLead is how much earlier than DrainTimeout before the deadline
// intake and task starts pause: with the default DrainTimeout (the gap),
// the pause then begins before the renewing registration is sent, so no
// task starts in the instant a registration may end the term.
const pauseLead = time.Millisecond

// wait blocks while the term is held but within DrainTimeout of its
// deadline with no renewal, and reports whether work may start: false once
// the term has ended or ctx has.
func (c *Consumer) wait(ctx context.Context, tr *term) bool {
	for {
		tr.mu.Lock()
		bumped := tr.bumped
		tr.mu.Unlock()
		if ctx.Err() != nil || !tr.t.Held() {
			return false
		}
		if time.Until(tr.t.Deadline()) >= c.opts.DrainTimeout+pauseLead {
			return true
		}
		// The renewal normally wakes us through bumped; the Term's Renewed
		// channel may also be read by the application, so look at the
		// deadline again every millisecond of the (short) pause too.
		select {
		case <-bumped:
		case <-tr.t.Done():
		case <-ctx.Done():
		case <-time.After(time.Millisecond):
		}
	}
}

func (c *Consumer) serve(ctx, watch context.Context, t *partition.Term, info transport.Info, s *sched, persistent transport.Reader) {
	a := t.Assignment()
	log := c.log.With("index", a.Index, "replicas", a.Replicas, "token", a.Token)
	tr := &term{t: t, a: a, flush: make(chan struct{}, 1), bumped: make(chan struct{})}
	c.cur.Store(tr)
	defer c.cur.CompareAndSwap(tr, nil)
	tr.ctx, tr.cancel = context.WithCancel(context.WithoutCancel(ctx))
	defer tr.cancel()
	go tr.watch()
	c.stats.terms.Add(1)

	reader := persistent
	if info.Log {
		r, err := c.openLog(ctx, tr, info)
		if err != nil {
			if !errors.Is(err, errTermOver) {
				log.Warn("cannot open the log for this term", "err", err)
			}
			return
		}
		reader = r
		defer r.Close()
	}
	log.Info("serving")
	c.gate.Resume()
	c.intake(ctx, watch, tr, reader, info, s, log)

	// Drain: stop taking, finish in flight by the lease's deadline (or
	// ShutdownTimeout), write the last checkpoints.
	c.gate.Stop()
	drainStart := time.Now()
	defer func() { c.drains.Observe(time.Since(drainStart)) }()
	waitCtx := tr.ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(tr.ctx, c.opts.ShutdownTimeout)
		defer cancel()
	}
	if err := c.gate.Wait(waitCtx); err != nil {
		log.Warn("work still running at the lease's deadline; its tasks will be done again by the next holder", "in_flight", c.gate.InFlight())
		tr.cancel()
		_ = c.gate.Wait(context.Background()) // handlers must honour their context
	}
	if info.Log {
		c.writeCheckpoint(tr, log)
	}
	log.Info("drained")
}

var errTermOver = errors.New("term over")

// openLog opens the ledger for the term and the log from its positions,
// retrying while the term lasts.
func (c *Consumer) openLog(ctx context.Context, tr *term, info transport.Info) (transport.Reader, error) {
	origin := make([]transport.Position, info.Shards)
	if c.opts.StartAtEnd {
		copy(origin, info.Ends)
	}
	backoff := 10 * time.Millisecond
	for {
		st, err := c.led.Open(tr.ctx, tr.a.Replicas, tr.a.Token, origin)
		if err == nil {
			from := st.From(tr.a.Index)
			r, err := c.src.Open(ctx, from)
			if err == nil {
				shards := make([]*shardTrack, len(from))
				for i, p := range from {
					shards[i] = &shardTrack{next: p, written: p}
				}
				tr.mu.Lock()
				tr.st, tr.shards = st, shards
				tr.mu.Unlock()
				return r, nil
			}
			return nil, fmt.Errorf("opening the source: %w", err)
		}
		if errors.Is(err, ledger.ErrStale) {
			return nil, err
		}
		c.log.Warn("cannot open the checkpoint ledger", "err", err)
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, time.Second)
		case <-tr.t.Done():
			return nil, errTermOver
		case <-ctx.Done():
			return nil, errTermOver
		}
	}
}

// intake reads and dispatches until the term ends, ctx ends, or the lease
// is within DrainTimeout of its deadline with no renewal.
func (c *Consumer) intake(ctx, watch context.Context, tr *term, r transport.Reader, info transport.Info, s *sched, log *slog.Logger) {
	// intakeCtx ends with the term, with Run's context, or with the lease.
	intakeCtx, cancelIntake := context.WithCancel(watch)
	defer cancelIntake()
	go func() {
		select {
		case <-tr.t.Done():
			cancelIntake()
		case <-intakeCtx.Done():
		}
	}()
	lastWrite := time.Now()
	for {
		if !c.wait(intakeCtx, tr) {
			return
		}
		// Fetch until intake must stop, and no longer than the next
		// checkpoint is due, so an idle source still gets its writes.
		until := tr.t.Deadline().Add(-c.opts.DrainTimeout - pauseLead)
		if info.Log {
			until = earliest(until, lastWrite.Add(c.opts.CheckpointInterval))
		}
		fctx, cancel := context.WithDeadline(intakeCtx, until)
		ms, err := r.Fetch(fctx)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			log.Warn("fetch failed", "err", err)
			select {
			case <-time.After(100 * time.Millisecond):
			case <-intakeCtx.Done():
			}
		}
		// Within a batch, the full check (wait) runs only once the pause is
		// due or the term may have ended: a clock read per message instead
		// of locks on the per-message path.
		pauseAt := tr.t.Deadline().Add(-c.opts.DrainTimeout - pauseLead)
		for i, m := range ms {
			if i > 0 && (!time.Now().Before(pauseAt) || isDone(tr.t.Done()) || intakeCtx.Err() != nil) {
				if !c.wait(intakeCtx, tr) {
					// The term has ended: the rest of the batch is not
					// taken. A log is read again from the checkpoints;
					// other sources lose it.
					if !info.Log {
						c.stats.unowned.Add(int64(len(ms) - i))
					}
					for _, m := range ms[i:] {
						if m.Ack != nil {
							m.Ack()
						}
					}
					return
				}
				pauseAt = tr.t.Deadline().Add(-c.opts.DrainTimeout - pauseLead)
			}
			if !c.dispatch(tr, m, info, s) {
				return
			}
		}
		if info.Log {
			due := !time.Now().Before(lastWrite.Add(c.opts.CheckpointInterval))
			select {
			case <-tr.flush:
				due = true
			default:
			}
			if due {
				c.writeCheckpoint(tr, log)
				lastWrite = time.Now()
			}
		}
	}
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// dispatch filters one message and hands an owned one to the scheduler.
func (c *Consumer) dispatch(tr *term, m *transport.Message, info transport.Info, s *sched) bool {
	id, idErr := uint64(0), m.Err
	if idErr != nil {
		id = ID(m.Key)
	} else if c.opts.ID != nil {
		id, idErr = c.opts.ID(m)
		if idErr != nil {
			id = ID(m.Key)
		}
	} else {
		id = ID(m.Key)
	}
	var sh *shardTrack
	if info.Log {
		if m.Shard < 0 || m.Shard >= len(tr.shards) {
			c.log.Warn("message from a shard the source did not describe; not taken", "shard", m.Shard)
			return true
		}
		sh = tr.shards[m.Shard]
	}
	skip := func() {
		if sh != nil {
			tr.mu.Lock()
			sh.next = m.Position.Next()
			tr.mu.Unlock()
		}
		if m.Ack != nil {
			m.Ack()
		}
	}
	if !tr.a.Owns(id) {
		c.stats.notOwned.Add(1)
		skip()
		return true
	}
	if sh != nil && tr.st.Done(m.Shard, m.Position, id) {
		c.stats.doneBefore.Add(1)
		skip()
		return true
	}
	select {
	case c.slots <- struct{}{}:
	case <-tr.t.Done():
		return false
	}
	if !c.gate.Enter() {
		<-c.slots
		return false
	}
	t := &task{m: m, id: id, idErr: idErr, tr: tr}
	if sh != nil {
		tr.mu.Lock()
		sh.inflight = append(sh.inflight, t)
		sh.next = m.Position.Next()
		tr.mu.Unlock()
	}
	s.push(t)
	return true
}

// run executes one task on a scheduler goroutine.
func (c *Consumer) run(t *task) {
	defer func() { <-c.slots }()
	defer c.gate.Leave()
	tr := t.tr
	if !c.attempt(t) {
		c.stats.abandoned.Add(1)
		if t.m.Ack != nil {
			t.m.Ack() // a copy of a source that is not a log: given up
		}
		return
	}
	c.stats.handled.Add(1)
	if t.m.Ack != nil {
		t.m.Ack()
	}
	tr.mu.Lock()
	t.finished = true
	tr.since++
	full := tr.since >= c.opts.CheckpointEvery
	tr.mu.Unlock()
	if full {
		select {
		case tr.flush <- struct{}{}:
		default:
		}
	}
}

// attempt runs the handler until it succeeds or the term's context ends,
// applying the failure policy; it reports whether the task is done.
func (c *Consumer) attempt(t *task) bool {
	ctx := t.tr.ctx
	backoff := c.opts.RetryMin
	for n := 1; ; n++ {
		// No attempt starts without a live term, nor close to its
		// deadline before a renewal: a task queued under a term that has
		// ended is left for the next holder (it is not done, so no
		// checkpoint passes it).
		if !c.wait(ctx, t.tr) {
			return false
		}
		err := t.idErr
		if err == nil {
			err = c.h(ctx, t.m)
		}
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false // cut off by the lease, not a failure of the task
		}
		c.stats.failed.Add(1)
		if c.opts.OnError != nil {
			c.opts.OnError(t.m, n, err)
		}
		c.log.Warn("task failed", "key", t.m.Key, "attempt", n, "err", err)
		if c.opts.MaxAttempts > 0 && n >= c.opts.MaxAttempts {
			if dlErr := c.opts.DeadLetter(ctx, t.m, err); dlErr == nil {
				c.stats.deadLetters.Add(1)
				return true
			} else {
				c.log.Warn("dead letter failed", "key", t.m.Key, "err", dlErr)
			}
		}
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, c.opts.RetryMax)
		case <-ctx.Done():
			return false
		}
	}
}

// writeCheckpoint writes the term's positions that moved since the last
// write.
func (c *Consumer) writeCheckpoint(tr *term, log *slog.Logger) {
	tr.mu.Lock()
	pos := map[int]transport.Position{}
	for s, sh := range tr.shards {
		if p := sh.checkpoint(); p != sh.written {
			pos[s] = p
		}
	}
	tr.since = 0
	tr.mu.Unlock()
	if len(pos) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.lease.Options().Interval)
	defer cancel()
	err := c.led.Write(ctx, tr.st.Current.N, tr.a.Token, tr.a.Index, pos)
	if err != nil {
		log.Warn("checkpoint not written", "err", err)
		return
	}
	c.stats.checkpoints.Add(1)
	tr.mu.Lock()
	for s, p := range pos {
		tr.shards[s].written = p
	}
	tr.mu.Unlock()
	c.trim(ctx, tr, log)
}

// trim lets a log that can drop finished entries (transport.Trimmer) drop
// those below every index's checkpoint in the current epoch: no holder
// reads below its own, and a new epoch starts at their minimum. Index 0's
// holder does it, at most once an interval.
func (c *Consumer) trim(ctx context.Context, tr *term, log *slog.Logger) {
	tm, ok := c.src.(transport.Trimmer)
	if !ok || tr.a.Index != 0 || time.Since(c.lastTrim) < c.lease.Options().Interval {
		return
	}
	c.lastTrim = time.Now()
	st, err := c.led.Read(ctx)
	if err != nil || st.Current == nil || st.Current.N != tr.st.Current.N {
		return
	}
	for s := range st.Current.Start {
		low := st.Current.At(s, 0)
		for k := 1; k < st.Current.R; k++ {
			if p := st.Current.At(s, k); p.Less(low) {
				low = p
			}
		}
		if err := tm.Trim(ctx, s, low); err != nil {
			log.Warn("trim failed", "shard", s, "err", err)
		}
	}
}
