package consumer

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/drain"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"golang.org/x/time/rate"
)

// term is the engine of one term of the lease: from the moment the lease
// issues it to the end of its drain, it opens the log (open.go), takes
// messages (intake.go) into its task book (book.go), whose tasks its
// runner (runner.go) runs (attempt.go), has its recorder write the
// book's marks (recorder.go) and drains (drain.go). It sees what outlives it only through shared.
// Everything a term starts is joined or detached by the end of serve.
type term struct {
	sh   *shared // the consumer's: configuration, user code, counters
	t    *partition.Term
	a    partition.Assignment
	info transport.Info
	log  *slog.Logger
	late lateReturns // the overdue handlers' returns, logged as one line

	// ctx is the handlers': it ends when the lease runs out (its deadline
	// passes with no renewal) or, at shutdown, at ShutdownTimeout.
	ctx    context.Context
	cancel context.CancelFunc
	// taking ends when the term stops taking work: the term ended, Run's
	// context ended, or the lease stopped. No attempt starts after it.
	taking     context.Context
	stopTaking context.CancelFunc
	over       atomic.Bool  // taking has ended (read on the per-task path)
	pauseAt    atomic.Int64 // unix ns: from then until a renewal, nothing starts
	// base and pauseAfter are pauseAt for the per-task check: time.Since
	// reads only the monotonic clock (one vDSO call), and a timer that
	// fires late on a busy process cannot let a task start past it.
	base       time.Time
	pauseAfter atomic.Int64 // ns since base

	gate drain.Gate // the attempts running: the drain waits for them
	r    *runner    // the task book and the workers that run its tasks
	// limiter is this worker's share of Options.GroupRate under this
	// term's mapping (nil: no limit).
	limiter *rate.Limiter

	// intakeDone is closed when intake returns. Intake runs on its own
	// goroutine (with Concurrency 1 it runs tasks too; see runner.go).
	intakeDone chan struct{}
	fetch      ioBackoff  // intake's fetches (the goroutine that fetches owns it)
	reread     ioBackoff  // reading waiting tasks again (under rereadMu)
	rereadMu   sync.Mutex // guards reread
	blocked    []bool     // intake's: per shard, reading stopped before a misplaced message (nil: none)
	realigning bool       // intake's: a misplaced message's realign has begun
	// realign is that realign's goroutine (intake.go block): the drain
	// waits for it before the term's last write, so that the reopen it
	// sets decides whether that write releases the index.
	realign sync.WaitGroup
	offers  []offer // intake's scratch: the owned messages of a batch
	tasks   []*task // intake's scratch: their tasks
	at      []int   // intake's scratch: their indexes in the batch

	// st, info and shards are set when the term opens, before intake
	// starts, and not changed after. shards[s] is nil where the term reads
	// nothing; what a shardTrack holds belongs to the book (under the
	// runner's lock).
	st     *checkpoint.State // logs only
	shards []*shardTrack
	rec    *recorder   // the term's recording: marks, trims, the handoff's readiness
	moved  atomic.Bool // a checkpoint write met a new epoch: open again
	// fencedEpoch: the epoch opened knows who serves it, so the fenced
	// handoff may leave it (checkpoint.Epoch.Fenced)
	fencedEpoch atomic.Bool
	grew        atomic.Int64 // the log has this many shards now: open again
	// allShards: an aligned source that is not a log, subscribed to every
	// shard (the group is misaligned); set before serving.
	allShards bool
	// reopen says why the log must be opened again under the term (a
	// misplaced task realigned the ledger; the shards read for what lay
	// below their cuts are done with): nil when it need not.
	reopen atomic.Pointer[string]
	// redo is the term's window of tasks a former holder may have done
	// (repeats.go); nil: none. Set when the term opens.
	redo *redo

	done chan struct{} // closed when serve is done: the watcher returns
	wg   sync.WaitGroup
}

func newTerm(sh *shared, runCtx, loop context.Context, t *partition.Term, info transport.Info) *term {
	a := t.Assignment()
	tr := &term{
		sh: sh, t: t, a: a, info: info,
		log:        sh.log.With("index", a.Index, "replicas", a.Replicas, "token", a.Token),
		done:       make(chan struct{}),
		intakeDone: make(chan struct{}),
	}
	tr.fetch = ioBackoff{spell: &sh.fetching, count: &sh.stats.fetchFailures}
	tr.reread = ioBackoff{spell: &sh.fetching, count: &sh.stats.fetchFailures}
	tr.ctx, tr.cancel = context.WithCancel(withAssignment(withOrigin(context.WithoutCancel(runCtx), Origin{Group: sh.group, Source: info}), a))
	tr.taking, tr.stopTaking = context.WithCancel(loop)
	_, reread := sh.src.(transport.Rereader)
	b := newBook(sh.opts.MaxPending, sh.opts.MaxWaiting, reread && info.Log)
	newW := func() *worker { return newWorker(tr.ctx) }
	tr.rec = newRecorder(sh, a, tr.ctx, tr.log)
	workers := sh.opts.Concurrency
	if workers == 1 {
		workers = 0 // intake's goroutine runs the tasks: no hand-off per task
	}
	tr.r = newRunner(b, newW(), workers, newW, tr.execute, sh.opts.CheckpointEvery, tr.rec.flush)
	tr.rec.r = tr.r
	tr.limiter = groupShare(sh.opts.GroupRate, sh.opts.GroupBurst, a.Replicas)
	tr.base = time.Now()
	tr.setPause()
	tr.wg.Go(func() { tr.watch(loop) })
	return tr
}

// setShards sets the shards the term reads (nil: not read), before intake
// starts.
func (tr *term) setShards(shards []*shardTrack) {
	tr.shards = shards
	tr.r.view(func(b *book) { b.open(shards, tr.info.Log) })
}

// pauseLead is how much earlier than MinTaskTime before the deadline
// intake and task starts pause: with the default MinTaskTime (the gap),
// the pause then begins before the renewing registration is sent, so no
// task starts in the instant a registration may end the term.
const pauseLead = time.Millisecond

// setPause moves the pause to the term's deadline now.
func (tr *term) setPause() {
	at := tr.t.Deadline().Add(-tr.sh.opts.MinTaskTime - pauseLead)
	tr.pauseAt.Store(at.UnixNano())
	tr.pauseAfter.Store(int64(at.Sub(tr.base)))
}

// stop ends taking: intake returns, no attempt starts, a push waiting for
// room gives up.
func (tr *term) stop() {
	tr.over.Store(true)
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
				tr.setPause()
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

// mayStartAt reports whether work may start at now (time since base), the
// common case, small enough to inline: the term takes work and is not in
// its pause, on the monotonic clock.
func (tr *term) mayStartAt(now time.Duration) bool {
	if tr.over.Load() || tr.sh.pause.on.Load() || isDone(tr.t.Done()) {
		return false
	}
	return int64(now) < tr.pauseAfter.Load()
}

// mayStart reports whether work may start now: the term takes work, the
// group is not paused (then it waits for the resume), and it is not within
// MinTaskTime of a deadline the renewal has not moved yet (then it waits
// for the renewal). The common case is mayStartAt.
func (tr *term) mayStart() bool {
	if tr.mayStartAt(time.Since(tr.base)) {
		return true
	}
	if tr.sh.pause.on.Load() { // the group is paused: wait for the resume, holding the lease
		if !tr.sh.pause.wait(tr.taking) {
			return false
		}
		return tr.mayStart()
	}
	// Strictly more than the lead must be left, as mayStartAt asks (now
	// before pauseAt): at exactly the lead, Room would say yes while
	// mayStartAt and intake's fetch deadline say no, and intake would
	// loop without waiting until the clock moved (on fake time, forever).
	return !tr.over.Load() && tr.t.Room(tr.taking, tr.sh.opts.MinTaskTime+pauseLead+time.Nanosecond) && !tr.over.Load()
}

// close ends what the term started (its watcher) and its handlers'
// context.
func (tr *term) close() {
	close(tr.done)
	tr.wg.Wait()
	tr.cancel()
	tr.stopTaking()
}
