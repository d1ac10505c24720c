package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
)

// overdueGrace is how long after its context has ended a handler may take
// to return before it counts as overdue: one that honours its context
// returns well within it.
const overdueGrace = 100 * time.Millisecond

// drain ends the term with its drain gate: stop admitting attempts, wait
// for those running until the lease's deadline (at shutdown, until
// ShutdownTimeout), then hand back what did not finish and write the last
// marks. Handlers still running then are overdue: their context has
// ended, their goroutines are left to return on their own, and their tasks
// are the next holder's.
func (tr *term) drain(shutdown bool) {
	start := time.Now()
	if tr.info.Log {
		// Now, while the term is held, not only after the wait: a handler
		// that runs to the deadline would otherwise delay the write until
		// the next holder has opened the ledger without it.
		if pastCuts, _ := tr.rec.write(false); pastCuts {
			tr.reopenPastCuts()
		}
	}
	waitCtx, grace := tr.ctx, overdueGrace
	if shutdown {
		grace = min(overdueGrace, tr.sh.opts.ShutdownTimeout/10)
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(tr.ctx, tr.sh.opts.ShutdownTimeout-grace)
		defer cancel()
	}
	err := tr.run.gate.Shutdown(waitCtx)
	if err != nil {
		// The handlers' context ends now (at the deadline it already has);
		// one that honours it returns within the grace.
		tr.cancel()
		gctx, cancel := context.WithTimeout(context.Background(), grace)
		err = tr.run.gate.Wait(gctx)
		cancel()
	}
	tr.r.close()
	intakeDetached := false
	if err != nil {
		late, n, intake := tr.r.detach(&tr.sh.overdue)
		intakeDetached = intake
		if n > 0 {
			tr.sh.stats.overdueTotal.Add(int64(n))
			var keys, positions []string
			for _, t := range late {
				if t.m != nil {
					keys = append(keys, t.m.Key)
					positions = append(positions, shardPos(t.shard, t.pos))
				}
			}
			// Every one, keys and positions (at most Concurrency): each of
			// these tasks may run twice.
			tr.log.WarnContext(tr.ctx, "handlers overdue: still running after their term, their context ended; the next holder may run their tasks while they do, so each may run twice (one more line when they have all returned)",
				"count", n, "keys", keys, "positions", positions, "intake", intake)
			if tr.run.late.detached(n) {
				tr.run.logLate()
			}
		}
	}
	if !intakeDetached {
		<-tr.rd.done
	}
	// A misplaced message's realign ends with taking (its waits and calls
	// are bounded by it), which intake returning on its own has not ended.
	tr.stop()
	tr.rd.realign.Wait()
	// What never finished (a detached worker's task among it) stays in the
	// book's lists: the last marks say it is not done.
	tr.run.abandon(tr.r.join())
	if tr.info.Log {
		// The last marks. Unless the term serves its index again (a new
		// epoch or shape under it), they release it: with the fenced
		// handoff, the next mapping's provisional terms wait for every
		// index's release, and the lease begins this worker's own next
		// term at once (Term.Release).
		release := !tr.moved.Load() && tr.grew.Load() == 0 && tr.reopen.Load() == nil
		pastCuts, err := tr.rec.write(release)
		if pastCuts {
			tr.reopenPastCuts()
		}
		if err == nil && release {
			tr.t.Release()
		}
		if err != nil && !errors.Is(err, checkpoint.ErrLate) {
			tr.rec.unwritten() // not again by this worker, whatever the ledger says
		}
		tr.rec.keepAges()
	}
	tr.rec.reportRedo()
	tr.sh.drains.Observe(time.Since(start))
	tr.log.InfoContext(tr.ctx, "drained", "took", time.Since(start))
}
