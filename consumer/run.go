package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
)

// Run runs the lease and the consumer until ctx ends, then stops taking,
// drains the work in flight while the lease is still held, writes the last
// checkpoints and stops the lease; it returns nil then. With
// Options.ServeToCap it first serves the term it holds to the lease's cap,
// registering no more (partition.Lease.Leave). It returns an error
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
	// A new worker waits two to four intervals for its first lease: say so,
	// so that a worker that prints nothing for that long is not taken for
	// a stuck one ("serving" follows once it holds its share).
	c.log.Info("waiting for a lease: a new worker holds its share within two to four intervals", "interval", c.interval)
	if c.user.discard {
		c.log.Info("permanent failures are discarded (Options.DeadLetter is consumer.Discard): each is logged at Warn and counted (Stats.Skipped), not kept")
	}
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
	// loop ends with ctx or when the lease returns; with ServeToCap, when
	// ctx ends while a term is held, when the lease returns after serving
	// it to its cap (Leave).
	loop, stopLoop := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLoop()
	wg.Go(func() {
		select {
		case <-leaseDone:
		case <-loop.Done():
		case <-ctx.Done():
			if c.servesToCap() {
				c.log.Info("leaving: the term is served to its cap, then drained")
				c.leaving.Store(true)
				c.lease.Leave()
				select {
				case <-leaseDone:
				case <-loop.Done():
				}
			}
		}
		stopLoop()
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
	// A log's ledger fences the lease's provisional terms: at a change of
	// the group, each worker drains and releases its share and takes the
	// new one an interval before the lease's timing would give it
	// (docs/PROTOCOL.md, "The fenced handoff").
	if info.Log && !c.opts.NoFencedHandoff {
		c.fenced.Store(true)
		c.lease.FenceHandoffs()
	}

	// A source that is not a log is read throughout, unless it is aligned:
	// then each term subscribes to the shards its lease can own ids in.
	_, subset := c.src.(transport.ShardOpener)
	readThroughout := !info.Log && !(info.Aligned && subset)
	var persistent transport.Reader
	defer func() {
		if persistent != nil {
			persistent.Close()
		}
	}()
	for loop.Err() == nil {
		if readThroughout && persistent == nil {
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

// servesToCap reports whether Run, its context ended, leaves the group by
// serving the term held to its cap (Options.ServeToCap): a term is held,
// and ShutdownTimeout covers the two intervals to a cap at most and the
// drain.
func (c *Consumer) servesToCap() bool {
	if !c.opts.ServeToCap || c.opts.ShutdownTimeout < 2*c.interval+c.opts.MinTaskTime {
		return false
	}
	t := c.lease.Term()
	return t != nil && t.Held()
}

// serve serves one term of the lease with a term engine: open the log at
// its marks, take and run tasks, then drain. When the marks move to a new
// epoch under the term (another holder found the log rewound), or the log
// grows shards, it drains and serves the term again with a new engine.
func (c *Consumer) serve(runCtx, loop context.Context, t *partition.Term, info transport.Info, persistent transport.Reader) {
	c.stats.terms.Add(1)
	for {
		why := c.serveOnce(runCtx, loop, t, info, persistent)
		if why == "" || !t.Held() || loop.Err() != nil {
			return
		}
		c.log.InfoContext(runCtx, why+"; opening the log again")
	}
}

// serveOnce serves t until it ends, or until the log must be opened again
// under it: its checkpoint writes met a new epoch, or the log has shards
// it was not opened with. It says why then, and returns "" otherwise.
func (c *Consumer) serveOnce(runCtx, loop context.Context, t *partition.Term, info transport.Info, persistent transport.Reader) (again string) {
	tr := newTerm(c.shared, runCtx, loop, t, info)
	defer tr.close()
	reader := persistent
	var r transport.Reader
	var err error
	switch {
	case info.Log:
		r, err = tr.open()
	case persistent == nil: // aligned: the term's own subscriptions
		r, err = tr.subscribe()
	default:
		shards := make([]*shardTrack, max(info.Shards, 1)) // for the age of the oldest task
		for s := range shards {
			shards[s] = &shardTrack{}
		}
		tr.setShards(shards)
	}
	if err != nil {
		if errors.Is(err, checkpoint.ErrStale) {
			tr.log.InfoContext(tr.ctx, "a newer mapping owns the checkpoints; the term is ending", "err", err)
		}
		tr.r.close()
		tr.r.join()
		return ""
	}
	if r != nil {
		defer r.Close()
		reader = r
	}
	c.cur.Store(tr)
	defer c.cur.CompareAndSwap(tr, nil)
	tr.log.InfoContext(tr.ctx, "serving")
	// Intake runs on its own goroutine: with Concurrency 1 it runs the
	// handlers too, and one that outlives the term must not keep the drain
	// from going on without it.
	tr.rd = tr.reading()
	go tr.rd.intake(reader)
	if info.Log {
		tr.wg.Go(tr.record)
		tr.wg.Go(tr.watchShards)
	}
	select {
	case <-tr.rd.done:
	case <-tr.taking.Done():
	}
	tr.drain(runCtx.Err() != nil)
	switch {
	case tr.moved.Load():
		return "the checkpoints moved to a new epoch during the term"
	case tr.grew.Load() > 0:
		return fmt.Sprintf("the log has %d shards now, not %d", tr.grew.Load(), len(tr.shards))
	case tr.reopen.Load() != nil:
		return *tr.reopen.Load()
	}
	return ""
}

// describe asks the source what it is, retrying with backoff until ctx
// ends (ok false then).
func (c *Consumer) describe(ctx context.Context) (transport.Info, bool) {
	defer c.unserved.Store(false)
	r := ioBackoff{spell: &c.opening, count: &c.stats.openFailures}
	for {
		info, err := c.src.Info(ctx)
		if err == nil {
			r.ok(ctx, c.log, "source described")
			return info, true
		}
		c.unserved.Store(true)
		if !r.wait(ctx, c.log, "cannot describe the source; retrying", err) {
			return transport.Info{}, false
		}
	}
}

// openPersistent opens a source that is not a log, retrying with backoff
// until ctx ends (nil then).
func (c *Consumer) openPersistent(ctx context.Context) transport.Reader {
	defer c.unserved.Store(false)
	r := ioBackoff{spell: &c.opening, count: &c.stats.openFailures}
	for {
		rd, err := c.src.Open(ctx, nil)
		if err == nil {
			r.ok(ctx, c.log, "source opened")
			return rd
		}
		c.unserved.Store(true)
		if !r.wait(ctx, c.log, "cannot open the source; retrying", err) {
			return nil
		}
	}
}

// discard reads a source that is not a log while this worker holds
// nothing, counting (and acknowledging) what it reads as Unheld, until a
// term is held. Leaving those messages in the subscription instead would
// have them handled later, under a mapping they did not arrive in, by a
// worker that may not have owned them when another one did.
func (c *Consumer) discard(ctx context.Context, r transport.Reader) (*partition.Term, error) {
	fetch := ioBackoff{spell: &c.fetching, count: &c.stats.fetchFailures}
	for {
		changed := c.lease.Changed()
		if t := c.lease.Term(); t != nil && t.Held() {
			return t, nil
		}
		fctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			select {
			case <-changed:
				cancel()
			case <-fctx.Done():
			}
		})
		ms, err := r.Fetch(fctx)
		cancel()
		wg.Wait()
		c.stats.read.Add(int64(len(ms)))
		for _, m := range ms {
			c.stats.unheld.Add(1)
			if m.Ack != nil {
				m.Ack()
			}
		}
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err == nil:
			fetch.ok(ctx, c.log, "fetch recovered")
		case !errors.Is(err, context.Canceled):
			if !fetch.wait(ctx, c.log, "fetch failing; retrying", err) {
				return nil, ctx.Err()
			}
		}
	}
}
