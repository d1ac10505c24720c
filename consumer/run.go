package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
)

// overdueGrace is how long after its context has ended a handler may take
// to return before it counts as overdue: one that honours its context
// returns well within it.
const overdueGrace = 100 * time.Millisecond

// Run runs the lease and the consumer until ctx ends, then stops taking,
// drains the work in flight while the lease is still held, writes the last
// checkpoints and stops the lease; it returns nil then. It returns an error
// when the lease does (for example a group with other settings), or when
// the source cannot be described.
//
// Run returns within ShutdownTimeout of ctx's end (plus a checkpoint write
// and the lease's stop) whatever the handlers do: handlers still running
// overdueGrace (100ms) before ShutdownTimeout have their context
// cancelled, and those that have not returned by ShutdownTimeout are left
// running, counted in Stats.Overdue. Every other goroutine Run started has
// returned when it returns.
func (c *Consumer) Run(ctx context.Context) (runErr error) {
	if !c.runs.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	leaseCtx, stopLease := context.WithCancel(context.WithoutCancel(ctx))
	leaseDone := make(chan struct{})
	var leaseErr error
	wg.Go(func() {
		leaseErr = c.lease.Run(leaseCtx)
		close(leaseDone)
	})
	// The lease's own error (a group with other settings, say) is Run's,
	// however the loop below ended: it is read after the lease has
	// returned, so no race can lose it.
	defer func() {
		stopLease()
		<-leaseDone
		if leaseErr != nil && runErr == nil {
			runErr = leaseErr
		}
	}()
	// loop ends with ctx or when the lease returns.
	loop, stopLoop := context.WithCancel(ctx)
	defer stopLoop()
	wg.Go(func() {
		select {
		case <-leaseDone:
			stopLoop()
		case <-loop.Done():
		}
	})

	// Presence runs until Run returns (after the drain), then removes the
	// record.
	presenceCtx, stopPresence := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPresence()
	wg.Go(func() { c.presence(presenceCtx) })

	// Describe the source, retrying while it fails (a broker not up yet, a
	// wrong credential: logged once per spell, counted, and the worker not
	// ready while it holds a share it cannot serve).
	info, ok := c.describe(loop)
	if !ok {
		return nil
	}
	if info.Log && c.ledger == nil {
		return fmt.Errorf("consumer: the source is a log but there is no checkpoint store: set Options.Checkpoints (the lease has no Redis client to keep them in)")
	}
	if info.Shards < 1 {
		info.Shards = 1
	}

	var persistent transport.Reader // a source that is not a log is read throughout
	defer func() {
		if persistent != nil {
			persistent.Close()
		}
	}()
	for loop.Err() == nil {
		if !info.Log && persistent == nil {
			persistent = c.openPersistent(loop)
			continue
		}
		var t *partition.Term
		var err error
		if persistent != nil {
			t, err = c.discard(loop, persistent)
		} else {
			t, err = c.lease.Next(loop)
		}
		if err != nil {
			break
		}
		c.serve(ctx, loop, t, info, persistent)
		// Never take the next term before this one's deadline has passed
		// or the term has ended: Next would return the same term.
		select {
		case <-t.Done():
		case <-loop.Done():
		}
	}
	return nil
}

// serve serves one term: open the log at the checkpoints (retrying while
// the term lasts), take and run tasks, then drain. When the checkpoints
// move to a new epoch under the term (another holder found the log
// rewound), it drains and opens again.
func (c *Consumer) serve(runCtx, loop context.Context, t *partition.Term, info transport.Info, persistent transport.Reader) {
	c.stats.terms.Add(1)
	for {
		why := c.serveOnce(runCtx, loop, t, info, persistent)
		if why == "" || !t.Held() || loop.Err() != nil {
			return
		}
		c.log.Info(why + "; opening the log again")
	}
}

// serveOnce serves t until it ends, or until the log must be opened again
// under it: its checkpoint writes met a new epoch, or the log has shards
// it was not opened with. It says why then, and returns "" otherwise.
func (c *Consumer) serveOnce(runCtx, loop context.Context, t *partition.Term, info transport.Info, persistent transport.Reader) (again string) {
	tr := c.newTerm(runCtx, loop, t, info)
	defer tr.close()
	reader := persistent
	if info.Log {
		r, err := c.openLog(tr)
		if err != nil {
			if errors.Is(err, checkpoint.ErrStale) {
				tr.log.Info("a newer mapping owns the checkpoints; the term is ending", "err", err)
			}
			tr.s.close()
			tr.s.join()
			return ""
		}
		defer r.Close()
		reader = r
	} else {
		tr.mu.Lock()
		tr.shards = []*shardTrack{{}} // for the age of the oldest task
		tr.mu.Unlock()
	}
	c.cur.Store(tr)
	defer c.cur.CompareAndSwap(tr, nil)
	tr.log.Info("serving")
	// Intake runs on its own goroutine: with Concurrency 1 it runs the
	// handlers too, and one that outlives the term must not keep the drain
	// from going on without it.
	go c.intake(tr, reader)
	if info.Log {
		tr.wg.Go(func() { c.writer(tr) })
		tr.wg.Go(func() { c.watchShards(tr) })
	}
	select {
	case <-tr.intakeDone:
	case <-tr.taking.Done():
	}
	c.drain(tr, runCtx.Err() != nil)
	switch {
	case tr.moved.Load():
		return "the checkpoints moved to a new epoch during the term"
	case tr.grew.Load() > 0:
		return fmt.Sprintf("the log has %d shards now, not %d", tr.grew.Load(), len(tr.shards))
	}
	return ""
}

// watchShards describes the log every DescribeInterval while the term is
// taken, and stops the term's intake when the log has more shards than it
// was opened with: serve then drains and opens it again under the same
// term. A failure to describe is left to the next look (the reader open
// meanwhile reports its own errors).
func (c *Consumer) watchShards(tr *term) {
	tick := time.NewTicker(c.opts.DescribeInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-tr.taking.Done():
			return
		case <-tr.done:
			return
		}
		info, err := c.src.Info(tr.taking)
		tr.mu.Lock()
		n := len(tr.shards)
		if err == nil {
			tr.ends = info.Ends
		}
		tr.mu.Unlock()
		if err == nil && info.Shards > n {
			tr.grew.Store(int64(info.Shards))
			tr.stop()
			return
		}
	}
}

// drain ends a term with the drain gate: stop admitting attempts, wait for
// those running until the lease's deadline (at shutdown, until
// ShutdownTimeout), then hand back what did not finish and write the last
// checkpoints. Handlers still running then are overdue: their context has
// ended, their goroutines are left to return on their own, and their tasks
// are the next holder's.
func (c *Consumer) drain(tr *term, shutdown bool) {
	start := time.Now()
	if tr.info.Log {
		// Now, while the term is held, not only after the wait: a handler
		// that runs to the deadline would otherwise delay the write until
		// the next holder has opened the ledger without it.
		c.writeCheckpoint(tr)
	}
	waitCtx, grace := tr.ctx, overdueGrace
	if shutdown {
		grace = min(overdueGrace, c.opts.ShutdownTimeout/10)
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(tr.ctx, c.opts.ShutdownTimeout-grace)
		defer cancel()
	}
	err := tr.gate.Shutdown(waitCtx)
	if err != nil {
		// The handlers' context ends now (at the deadline it already has);
		// one that honours it returns within the grace.
		tr.cancel()
		gctx, cancel := context.WithTimeout(context.Background(), grace)
		err = tr.gate.Wait(gctx)
		cancel()
	}
	tr.s.close()
	intakeDetached := false
	if err != nil {
		late := tr.s.detach(&c.overdue)
		if tr.w0.detach(&c.overdue) {
			intakeDetached = true
			late = append(late, nil)
		}
		if len(late) > 0 {
			c.stats.overdueTotal.Add(int64(len(late)))
			var keys []string
			for _, t := range late {
				if t != nil {
					keys = append(keys, t.m.Key)
				}
			}
			tr.log.Warn("handlers overdue: still running after their term, their context ended; the next holder may run their tasks while they do",
				"count", len(late), "keys", keys, "intake", intakeDetached)
		}
	}
	if !intakeDetached {
		<-tr.intakeDone
	} else {
		// Intake is stuck in user code in the middle of a batch: reading
		// advances over the messages behind it, not past the one it runs.
		tr.mu.Lock()
		if ms := tr.curBatch; ms != nil {
			n := int(tr.batchDone.Load())
			tr.advance(ms, n)
			if n < len(ms) {
				c.stats.abandoned.Add(1)
			}
			tr.curBatch = nil
		}
		tr.mu.Unlock()
	}
	c.abandon(tr.s.join())
	if tr.info.Log {
		c.writeCheckpoint(tr)
		c.carry(tr)
	}
	c.drains.Observe(time.Since(start))
	tr.log.Info("drained", "took", time.Since(start))
}

var errTermOver = errors.New("consumer: the term ended")

// openLog opens the ledger for the term and the log from its positions,
// retrying with backoff for as long as the term lasts: a held index is
// always being served, or being retried and reported (Stats.Unserved).
func (c *Consumer) openLog(tr *term) (transport.Reader, error) {
	var backoff time.Duration
	defer c.unserved.Store(false)
	for {
		r, err := c.openLogOnce(tr)
		if err == nil {
			c.opened(tr)
			return r, nil
		}
		if errors.Is(err, checkpoint.ErrStale) {
			return nil, err
		}
		c.openFailed(tr, err)
		backoff = min(max(2*backoff, retryFloor), retryCeiling)
		if !sleep(tr.taking, backoff) {
			return nil, errTermOver
		}
	}
}

// openLogOnce describes the log again (shards added since, its ends),
// opens the ledger, and opens the log at the index's marks. A shard whose
// log ends below its mark was recreated: it is reported, and the ledger is
// opened again to start it over from its beginning, so that nothing of the
// new log is skipped.
func (c *Consumer) openLogOnce(tr *term) (transport.Reader, error) {
	info, err := c.src.Info(tr.taking)
	if err != nil {
		return nil, fmt.Errorf("describing the source: %w", err)
	}
	if !info.Log {
		return nil, fmt.Errorf("the source is no longer a log")
	}
	info.Shards = max(info.Shards, 1)
	origin := make([]transport.Position, info.Shards)
	if c.opts.StartAtEnd {
		copy(origin, info.Ends)
	}
	req := checkpoint.OpenRequest{Replicas: tr.a.Replicas, Index: tr.a.Index, Token: tr.a.Token, Origin: origin}
	c.seenMu.Lock()
	req.Seen, req.SeenStart = c.seen, c.seenStart
	c.seenMu.Unlock()
	st, err := c.ledger.Open(tr.taking, req)
	if err != nil {
		return nil, err
	}
	from := st.From(tr.a.Index)
	for s, p := range from {
		if s < len(info.Ends) && info.Ends[s].Less(p) {
			req.Rewound = append(req.Rewound, s)
			req.Origin[s] = transport.Position{} // all of the new log
		}
	}
	if len(req.Rewound) > 0 {
		c.stats.rewinds.Add(int64(len(req.Rewound)))
		tr.log.Warn("the log went back below the checkpoints (deleted and created again?): reading those shards again from their start; nothing of the new log is skipped",
			"shards", req.Rewound, "ends", info.Ends, "checkpoints", from)
		if st, err = c.ledger.Open(tr.taking, req); err != nil {
			return nil, err
		}
		from = st.From(tr.a.Index)
	}
	c.noteLedger(tr, req, st)
	r, err := c.src.Open(tr.taking, from)
	if err != nil {
		return nil, fmt.Errorf("opening the source: %w", err)
	}
	shards := make([]*shardTrack, len(from))
	for i, p := range from {
		shards[i] = &shardTrack{next: p, written: st.Current.Mark(i, tr.a.Index)}
	}
	tr.mu.Lock()
	tr.info, tr.st, tr.shards, tr.ends = info, st, shards, info.Ends
	tr.mu.Unlock()
	return r, nil
}

// describe asks the source what it is, retrying with backoff until ctx
// ends (ok false then).
func (c *Consumer) describe(ctx context.Context) (transport.Info, bool) {
	var backoff time.Duration
	defer c.unserved.Store(false)
	for {
		info, err := c.src.Info(ctx)
		if err == nil {
			if n, lasted, ok := c.opening.end(); ok {
				c.log.Info("source described", "failures", n, "after", lasted)
			}
			return info, true
		}
		c.stats.openFailures.Add(1)
		c.unserved.Store(true)
		if c.opening.fail() {
			c.log.Warn("cannot describe the source; retrying", "err", err)
		}
		backoff = min(max(2*backoff, retryFloor), retryCeiling)
		if !sleep(ctx, backoff) {
			return transport.Info{}, false
		}
	}
}

// openPersistent opens a source that is not a log, retrying with backoff
// until ctx ends (nil then).
func (c *Consumer) openPersistent(ctx context.Context) transport.Reader {
	var backoff time.Duration
	for {
		r, err := c.src.Open(ctx, nil)
		if err == nil {
			c.unserved.Store(false)
			if n, lasted, ok := c.opening.end(); ok {
				c.log.Info("source opened", "failures", n, "after", lasted)
			}
			return r
		}
		c.stats.openFailures.Add(1)
		c.unserved.Store(true)
		if c.opening.fail() {
			c.log.Warn("cannot open the source; retrying", "err", err)
		}
		backoff = min(max(2*backoff, retryFloor), retryCeiling)
		if !sleep(ctx, backoff) {
			c.unserved.Store(false)
			return nil
		}
	}
}

func (c *Consumer) openFailed(tr *term, err error) {
	c.stats.openFailures.Add(1)
	c.unserved.Store(true)
	if errors.Is(err, checkpoint.ErrCorrupt) {
		// Nothing of a ledger that cannot be read is served (its marks
		// might skip work): the worker keeps its lease, keeps trying (an
		// operator may repair or delete the hash), and says so loudly.
		c.stats.corruptLedger.Add(1)
		if c.opening.fail() {
			tr.log.Error("cannot serve the index held: the checkpoint ledger is corrupt; serving nothing of it, retrying while the term lasts", "err", err)
		}
		return
	}
	if c.opening.fail() {
		tr.log.Warn("cannot serve the index held: opening failed; retrying while the term lasts", "err", err)
	}
}

func (c *Consumer) opened(tr *term) {
	if n, lasted, ok := c.opening.end(); ok {
		tr.log.Info("opened", "failures", n, "after", lasted)
	}
}

// noteLedger remembers the newest epoch this worker has seen, so that a
// ledger lost later is recreated from its start rather than from the
// origin, and reports a ledger that was lost or behind.
func (c *Consumer) noteLedger(tr *term, req checkpoint.OpenRequest, st *checkpoint.State) {
	if st.Lost || st.Behind {
		c.stats.ledgerLosses.Add(1)
		tr.log.Warn("checkpoint ledger lost or behind: its store lost writes (eviction, flush, failover); work since may be done again, none is skipped",
			"seen_epoch", req.Seen, "epoch", st.Current.N, "lost", st.Lost, "behind", st.Behind)
	}
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	if st.Current.N >= c.seen {
		c.seen, c.seenStart = st.Current.N, slices.Clone(st.Current.Start)
	}
}
