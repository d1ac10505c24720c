package consumer

import (
	"sync/atomic"
	"time"

	"github.com/nandi-go/nandi/hist"
)

// Stats counts what a Consumer did. Counts are since New; gauges are now.
type Stats struct {
	// Read counts the messages read from the source, and Owned those of
	// them the lease owned (taken as tasks, or skipped as finished by an
	// earlier epoch): over a group, Read/Owned is its read amplification,
	// 1 when an aligned log's shard count is a multiple of the group's
	// size, Replicas on a log that is not aligned.
	Read, Owned int64
	// RateWaits counts the handler calls that waited for the group's rate
	// (Options.GroupRate).
	RateWaits int64
	// Paused is whether this worker has seen its group paused (Pause),
	// and PausedSince since when the group is paused.
	Paused      bool
	PausedSince time.Time
	Handled     int64 // tasks whose handler succeeded
	NotOwned    int64 // messages skipped as another index's
	DoneBefore  int64 // messages skipped as finished: by an earlier epoch, or by this worker in an earlier term after its last checkpoint
	// Redone counts the tasks taken that a former holder may have done
	// already: it did not release its index (it crashed, stalled past its
	// lease, or its last write failed), or the ledger was lost. Each may
	// run twice; a term logs them (their shards and positions) when it
	// ends. The other way a task runs twice, a handler that overran its
	// lease, is OverdueTotal, logged with the keys and positions by the
	// worker that ran it.
	Redone      int64
	Failed      int64 // failed attempts (a panic is one)
	DeadLetters int64 // tasks given to DeadLetter successfully
	// DeadLetterFailures counts the DeadLetter calls that failed (a
	// Redis blip, the default stream full: DefaultDeadLetterLimit): each
	// retried with backoff, its task kept.
	DeadLetterFailures int64
	Skipped            int64 // tasks dropped by DeadLetter: Discard, each logged (or, on a lease without a Redis, with no DeadLetter)
	Abandoned          int64 // tasks not done when their term ended (done again by the next holder)
	Unheld             int64 // messages of a source that is not a log read while holding nothing: lost (NATS core, Watermill)
	Checkpoints        int64 // checkpoint writes
	Terms              int64 // terms served

	Panics             int64 // calls into user code that panicked (handler, DeadLetter, OnError, ID)
	FetchFailures      int64 // failed fetches (retried with backoff)
	OpenFailures       int64 // failed opens of the checkpoints or the source (retried while the term lasts)
	CheckpointFailures int64 // failed checkpoint writes (the next write carries them)
	BadShard           int64 // messages from a shard the source did not describe (a transport bug; not taken)
	OverdueTotal       int64 // handlers that outlived their term (see Overdue)
	LedgerLosses       int64 // opens that found the checkpoint ledger gone or behind what this worker had seen
	Rewinds            int64 // shards found to end below their checkpoint (a log deleted and created again): read again from their start
	FencedHandoffs     int64 // terms served from a provisional lease: taken at a change of the group once every former holder released (the fenced handoff)
	CorruptLedger      int64 // opens that found the checkpoint ledger unreadable (checkpoint.ErrCorrupt): nothing of it served, retried while the term lasts
	Reread             int64 // messages read again from the log (transport.Rereader): tasks that had waited light behind a failing id
	// Misplaced counts the tasks found in a shard of an aligned source
	// that their id does not belong to (the producers do not place as the
	// source declares): the first of a log's epoch, and the first of a
	// worker's subscriptions, is logged at Error, and the group reads more
	// so that nothing is skipped (a log's ledger realigns; subscriptions
	// go to every shard: MisalignedKey). See docs/transports.md, "Aligned
	// shards".
	Misplaced int64

	InFlight int64 // calls into user code running now, overdue ones included
	// Overdue is how many handlers are still running after the end of
	// their term, their context ended: the worker went on without them,
	// and the next holder may run their tasks meanwhile.
	Overdue int64
	// Unserved is true while a term is held but its checkpoints or its
	// source cannot be opened (the consumer retries while the term lasts).
	Unserved bool
	// Pending is how many tasks of the term being served are taken and not
	// finished and held whole: queued, running or waiting to retry (at
	// most MaxPending).
	Pending int64
	// Waiting is how many tasks of the term being served wait light behind
	// an id whose first task has failed: held as their place in the log
	// only, and read again when their turn comes (at most MaxWaiting).
	Waiting int64
	// Oldest is, per shard of the term being served, how long its oldest
	// unfinished task has waited since this worker first took it (0 when
	// none), across its terms: a task a term left unfinished and the next
	// gives back to the same worker (indexes are sticky) keeps its age. Nil
	// when nothing is being served. A task that keeps failing shows here.
	Oldest []time.Duration

	// Handling is how long each handler call took.
	Handling hist.Snapshot

	// Drains is how long each drain took: from stopping intake to the last
	// handler's return and the last checkpoint write (at every change of
	// mapping, and at shutdown).
	Drains hist.Snapshot
}

type stats struct {
	handled, notOwned, doneBefore, failed, deadLetters, skipped, abandoned, unheld, checkpoints, terms     atomic.Int64
	panics, fetchFailures, openFailures, checkpointFailures, badShard, overdueTotal, ledgerLosses, rewinds atomic.Int64
	corruptLedger, reread, read, owned, rateWaits, misplaced, fencedHandoffs, deadLetterFailures, redone   atomic.Int64
}

// Stats returns the counts so far.
func (c *Consumer) Stats() Stats {
	s := &c.stats
	out := Stats{
		Handled: s.handled.Load(), NotOwned: s.notOwned.Load(), DoneBefore: s.doneBefore.Load(),
		Failed: s.failed.Load(), DeadLetters: s.deadLetters.Load(), Skipped: s.skipped.Load(), DeadLetterFailures: s.deadLetterFailures.Load(), Redone: s.redone.Load(),
		Abandoned: s.abandoned.Load(), Unheld: s.unheld.Load(), Checkpoints: s.checkpoints.Load(), Terms: s.terms.Load(),
		Panics: s.panics.Load(), FetchFailures: s.fetchFailures.Load(), OpenFailures: s.openFailures.Load(),
		CheckpointFailures: s.checkpointFailures.Load(), BadShard: s.badShard.Load(), OverdueTotal: s.overdueTotal.Load(),
		LedgerLosses: s.ledgerLosses.Load(), Rewinds: s.rewinds.Load(), CorruptLedger: s.corruptLedger.Load(), Reread: s.reread.Load(), Read: s.read.Load(), Owned: s.owned.Load(), RateWaits: s.rateWaits.Load(),
		Misplaced: s.misplaced.Load(), FencedHandoffs: s.fencedHandoffs.Load(),
		InFlight: c.running.Load(), Overdue: c.overdue.Load(),
		Drains: c.drains.Snapshot(), Handling: c.handling.Snapshot(),
	}
	out.Paused, out.PausedSince, _ = c.pause.state()
	if c.unserved.Load() {
		_, out.Unserved = c.lease.Current()
	}
	if tr := c.cur.Load(); tr != nil {
		mnow := monoNow()
		if tr.shards != nil {
			out.Oldest = make([]time.Duration, len(tr.shards))
		}
		tr.r.view(func(b *book) {
			for i, sh := range tr.shards {
				if sh == nil {
					continue
				}
				out.Pending += int64(sh.n)
				if sh.head != nil {
					out.Oldest[i] = sh.head.taken.since(mnow)
				}
			}
			out.Waiting = int64(b.waiting)
		})
		out.Pending = max(out.Pending-out.Waiting, 0)
	}
	return out
}
