package consumer

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
)

// term is one term of the lease, from the moment the lease issues it to
// the end of its drain, and owns only its lifecycle: it opens the log
// (open.go), watches the lease (watch: renewals move its start window),
// stops taking, and drains (drain.go). Its jobs belong to owners with
// state of their own, each in one place:
//
//   - reading (intake.go): intake, the read-ahead, fetch retries, the
//     ownership filter, a misplaced message's realign;
//   - the runner (runner.go) with its task book (book.go): which task runs
//     next, on which worker, and when a retry is due;
//   - attempts (attempt.go): the calls into user code inside the drain
//     gate, the failure policy's decisions (policy.go), refills, the rate
//     limit, overdue calls;
//   - the recorder (recorder.go): marks, checkpoint writes, trims, the
//     handover's readiness.
//
// They share the term's start window (window.go), which says whether work
// may start, and tell the lifecycle what they meet through moved, grew and
// reopen. The term sees what outlives it only through shared. Everything
// it starts is joined or detached by the end of serve.
type term struct {
	sh   *shared // the consumer's: configuration, user code, counters
	t    *partition.Term
	a    partition.Assignment
	info transport.Info
	log  *slog.Logger

	// ctx is the handlers': it ends when the lease runs out (its deadline
	// passes with no renewal) or, at shutdown, at ShutdownTimeout.
	ctx    context.Context
	cancel context.CancelFunc
	// taking ends when the term stops taking work: the term ended, Run's
	// context ended, or the lease stopped. No attempt starts after it.
	taking     context.Context
	stopTaking context.CancelFunc
	win        *startWindow // when work may start; watch moves it

	r   *runner   // the task book and the workers that run its tasks
	run *attempts // what an attempt does
	rec *recorder // marks, checkpoint writes, trims, the handoff's readiness
	rd  *reading  // made when the term has opened (serve); nil before

	// What the term opened, set before reading starts and not changed
	// after: info above, st, shards (nil where the term reads nothing),
	// redo, and allShards (an aligned source that is not a log, subscribed
	// to every shard: the group is misaligned).
	st        *checkpoint.State // logs only
	shards    []*shardTrack
	redo      *redo
	allShards bool

	// Why the log must be opened again under the term, as its owners find
	// it: a checkpoint write met a new epoch (moved); the log has this many
	// shards now (grew); a misplaced task realigned the ledger, or the
	// shards read for what lay below their cuts are done with (reopen: nil
	// when it need not).
	moved  atomic.Bool
	grew   atomic.Int64
	reopen atomic.Pointer[string]
	// fencedEpoch: the epoch opened knows who serves it, so the fenced
	// handoff may leave it (checkpoint.Epoch.Fenced)
	fencedEpoch atomic.Bool

	done chan struct{} // closed when serve is done: the watcher returns
	wg   sync.WaitGroup
}

func newTerm(sh *shared, runCtx, loop context.Context, t *partition.Term, info transport.Info) *term {
	a := t.Assignment()
	tr := &term{
		sh: sh, t: t, a: a, info: info,
		log:  sh.log.With("index", a.Index, "replicas", a.Replicas, "token", a.Token),
		done: make(chan struct{}),
	}
	tr.ctx, tr.cancel = context.WithCancel(withAssignment(withOrigin(context.WithoutCancel(runCtx), Origin{Group: sh.group, Source: info}), a))
	tr.taking, tr.stopTaking = context.WithCancel(loop)
	tr.win = newStartWindow(t, &sh.pause, tr.taking, sh.opts.MinTaskTime)
	tr.run = &attempts{
		sh: sh, info: info, log: tr.log, ctx: tr.ctx, taking: tr.taking, win: tr.win,
		policy: failurePolicy{maxAttempts: sh.opts.MaxAttempts, retryDelay: sh.user.retryDelay, deadLetter: sh.user.deadLetter != nil,
			retryMin: sh.opts.RetryMin, retryMax: sh.opts.RetryMax},
		limiter: groupShare(sh.opts.GroupRate, sh.opts.GroupBurst, a.Replicas),
		reread:  ioBackoff{spell: &sh.fetching, count: &sh.stats.fetchFailures},
	}
	_, reread := sh.src.(transport.Rereader)
	b := newBook(sh.opts.MaxPending, sh.opts.MaxWaiting, reread && info.Log)
	newW := func() *worker { return newWorker(tr.ctx) }
	tr.rec = newRecorder(sh, a, tr.ctx, tr.log)
	workers := sh.opts.Concurrency
	if workers == 1 {
		workers = 0 // intake's goroutine runs the tasks: no hand-off per task
	}
	tr.r = newRunner(b, newW(), workers, newW, tr.run.execute, tr.win, tr.wg.Go, sh.opts.CheckpointEvery, tr.rec.flush)
	tr.rec.r = tr.r
	tr.run.book, tr.run.doneLate = tr.r.view, tr.rec.late
	tr.wg.Go(func() { tr.watch(loop) })
	return tr
}

// setShards sets the shards the term reads (nil: not read), before intake
// starts.
func (tr *term) setShards(shards []*shardTrack) {
	tr.shards = shards
	tr.r.view(func(b *book) { b.open(shards, tr.info.Log) })
}

// reading makes the term's reading of what it opened.
func (tr *term) reading() *reading {
	return &reading{
		sh: tr.sh, a: tr.a, info: tr.info, log: tr.log, ctx: tr.ctx, taking: tr.taking, win: tr.win, r: tr.r, run: tr.run,
		st: tr.st, shards: tr.shards, redo: tr.redo, allShards: tr.allShards,
		reopen: &tr.reopen, grew: &tr.grew, stop: tr.stop, goroutines: &tr.wg,
		done:  make(chan struct{}),
		fetch: ioBackoff{spell: &tr.sh.fetching, count: &tr.sh.stats.fetchFailures},
	}
}

// stop ends taking: intake returns, no attempt starts, a push waiting for
// room gives up.
func (tr *term) stop() {
	tr.win.end()
	tr.stopTaking()
	tr.r.halt()
}

// watch follows the lease for the term: each renewal moves the pause (and
// the one that hands it over has the presence record written at once);
// the term's end, or the end of Run's context or of the lease, stops
// taking; the deadline passing with no renewal ends the handlers' context.
func (tr *term) watch(loop context.Context) {
	timer := time.NewTimer(time.Until(tr.t.Deadline()))
	defer timer.Stop()
	ended, stopping := tr.t.Done(), loop.Done()
	handedOver := false
	for {
		var renewal <-chan struct{}
		if ended != nil {
			renewal = tr.t.Renewal()
		}
		select {
		case <-ended:
			ended = nil
			tr.stop()
		case <-stopping:
			stopping = nil
			tr.stop()
		case <-renewal:
			if !isDone(tr.t.Done()) {
				tr.win.renewed()
				timer.Reset(time.Until(tr.t.Deadline()))
			}
			if !handedOver && tr.t.HandingOver() {
				handedOver = true
				// The fenced handoff: the next mapping's holders wait for
				// this index's release, not for the cap. Drain once every
				// index is ready to (handOver), unless this worker is
				// leaving (it serves to its cap: nobody takes its share
				// before) or the epoch cannot be left so (the first, or one
				// created after a loss).
				if tr.sh.fenced.Load() && !tr.sh.leaving.Load() && tr.fencedEpoch.Load() {
					tr.wg.Go(tr.handOver)
				}
				select { // say so now: the handover lasts less than an interval
				case tr.sh.presenceNow <- struct{}{}:
				default:
				}
			}
		case <-timer.C:
			d := tr.t.Deadline()
			if !time.Now().Before(d) {
				tr.stop()
				tr.cancel()
				return
			}
			timer.Reset(time.Until(d))
		case <-tr.done:
			return
		}
	}
}

// close ends what the term started (its watcher) and its handlers'
// context.
func (tr *term) close() {
	close(tr.done)
	tr.wg.Wait()
	tr.cancel()
	tr.stopTaking()
}
