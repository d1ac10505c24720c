package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/transport"
)

// offer is an owned message of a batch, as the filter passes it on: its
// task id, the permanent failure intake found (Message.Err,
// an Options.ID error), and its index in the batch.
type offer struct {
	m   *transport.Message
	id  uint64
	err error
	i   int
}

// intake reads and takes batches until the term stops taking: each batch
// through the ownership filter (filter) and into the task book (submit),
// whose runner runs them. It reads only while work may start
// (not within MinTaskTime of a deadline the renewal has not moved yet).
// Marks are written by the term's recorder (recorder.go), never waited for
// here. It runs on its own goroutine, which the drain detaches if user
// code it runs (Options.ID, or a task at Concurrency 1) outlives the term;
// it then returns touching nothing.
func (tr *term) intake(r transport.Reader) {
	defer close(tr.intakeDone)
	next := tr.readNow(r)
	if tr.info.Log {
		next = tr.readAhead(r)
	}
	for tr.r.runDue() && tr.mayStart() {
		ms, ok := next()
		if !ok {
			return
		}
		if len(ms) == 0 {
			continue // a retry came due first
		}
		offers, kept, ok := tr.filter(ms)
		if !ok || !tr.takeIn(kept, offers) {
			return
		}
		if tr.sh.misaligned.Load() && !tr.allShards && tr.info.Aligned && !tr.info.Log {
			why := "a misplaced message: subscribing to every subject"
			tr.reopen.CompareAndSwap(nil, &why)
			return
		}
	}
}

// readNow reads a source that is not a log: it loses what is read and not
// taken, so nothing is read ahead, and a fetch lasts until intake must
// pause, or the next retry intake runs comes due (then it returns no
// messages, and intake looks again). ok is false when the term stopped
// taking.
func (tr *term) readNow(r transport.Reader) func() ([]*transport.Message, bool) {
	return func() ([]*transport.Message, bool) {
		until := time.Unix(0, tr.pauseAt.Load())
		if d := tr.r.nextDue(); !d.IsZero() {
			until = earliest(until, d)
		}
		fctx, cancel := context.WithDeadline(tr.taking, until)
		ms, err := r.Fetch(fctx)
		cancel()
		return ms, tr.fetched(err)
	}
}

// readAhead reads a log one batch ahead of intake, on a goroutine of its
// own (a log keeps what is read and not taken: the marks never pass it),
// so that the transport's decoding and the handlers overlap. A read
// returns no messages when the next retry intake runs comes due first; ok
// is false when the term stopped taking.
func (tr *term) readAhead(r transport.Reader) func() ([]*transport.Message, bool) {
	batches := make(chan []*transport.Message, 1)
	tr.wg.Go(func() {
		for tr.taking.Err() == nil {
			ms, err := r.Fetch(tr.taking)
			if !tr.fetched(err) {
				return
			}
			if len(ms) == 0 {
				continue
			}
			select {
			case batches <- ms:
			case <-tr.taking.Done():
				return
			}
		}
	})
	due := time.NewTimer(time.Hour)
	due.Stop()
	return func() ([]*transport.Message, bool) {
		var dueC <-chan time.Time
		if d := tr.r.nextDue(); !d.IsZero() {
			due.Reset(time.Until(d))
			defer due.Stop()
			dueC = due.C
		}
		select {
		case ms := <-batches:
			return ms, true
		case <-dueC:
			return nil, true
		case <-tr.taking.Done():
			return nil, false
		}
	}
}

// fetched accounts for a fetch's error: a failure is counted, logged once
// per spell and waited out with backoff. It returns false when the term
// stopped taking meanwhile.
func (tr *term) fetched(err error) bool {
	switch {
	case err == nil:
		tr.fetch.ok(tr.taking, tr.log, "fetch recovered")
	case errors.Is(err, transport.ErrClosed):
		return false
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return tr.taking.Err() == nil
	default:
		return tr.fetch.wait(tr.taking, tr.log, "fetch failing; retrying", err)
	}
	return true
}

// filter is the ownership filter, the one place that decides what of a
// batch is the term's: a message from a shard the source did not describe
// (a transport bug), another index's, or one an earlier epoch finished is
// counted and acknowledged (for sources that want that) and left out;
// every other becomes an offer. Options.ID is user code: called inside
// the gate, as intake's attempt, so that one that never returns is
// detached like a handler. On an aligned log, a message in a shard its id
// does not belong to (checkpoint.Epoch.Placed) stops that shard's reading
// before it (block): it and the shard's later messages are left out of
// kept, the messages reading passes, and are read again once the term
// opens the log again. kept are the batch's other messages, in order
// (offers index them). It returns ok false when intake was detached or
// the term is draining.
func (tr *term) filter(ms []*transport.Message) (offers []offer, kept []*transport.Message, ok bool) {
	userID := tr.sh.opts.ID != nil
	if userID && !tr.enterIntake() {
		return nil, nil, false
	}
	offers = tr.offers[:0]
	var notOwned, doneBefore int64
	var cur *checkpoint.Epoch
	if tr.st != nil {
		cur = tr.st.Current
	}
	kept = ms[:0] // in place: a message is kept at or before its index
	for _, m := range ms {
		if m.Shard < 0 || m.Shard >= len(tr.shards) || tr.shards[m.Shard] == nil {
			tr.noteBadShard(m)
			continue
		}
		if tr.blocked != nil && tr.blocked[m.Shard] {
			continue
		}
		id, err := tr.sh.user.id(m)
		if userID && tr.r.w0.detached() {
			return nil, nil, tr.detachedReturn()
		}
		if err != nil && tr.info.Aligned {
			// No id to place it by: it belongs to the index that reads its
			// shard (shard s is read by index s % Replicas, whatever the
			// epoch), so that exactly one worker reports it.
			id = uint64(m.Shard)
		}
		if cur != nil && err == nil {
			if placed, _ := cur.Placed(m.Shard, m.Position, id); !placed {
				tr.block(m)
				continue
			}
		}
		if cur == nil && err == nil && tr.info.Aligned && !tr.info.Log {
			tr.placedLossy(m, id)
		}
		kept = append(kept, m)
		i := len(kept) - 1
		if !tr.a.Owns(id) {
			notOwned++
			if m.Ack != nil {
				m.Ack()
			}
			continue
		}
		if tr.sh.finished.has(m.Shard, m.Position, id) { // this worker's, done in an earlier term and not written
			doneBefore++
			if m.Ack != nil {
				m.Ack()
			}
			continue
		}
		offers = append(offers, offer{m: m, id: id, err: err, i: i})
	}
	if userID && !tr.leaveIntake() {
		return nil, nil, false
	}
	if tr.st != nil {
		if !tr.prepare(offers) {
			return nil, nil, false
		}
		kept := offers[:0]
		for _, o := range offers {
			if tr.st.Done(o.m.Shard, o.m.Position, o.id) {
				doneBefore++
				if o.m.Ack != nil {
					o.m.Ack()
				}
				continue
			}
			kept = append(kept, o)
		}
		offers = kept
		if tr.redo != nil {
			var n int64
			for _, o := range offers {
				if tr.redo.at(o.m.Shard, o.m.Position, o.id) {
					n++
				}
			}
			tr.sh.stats.redone.Add(n)
		}
	}
	tr.sh.stats.notOwned.Add(notOwned)
	tr.sh.stats.doneBefore.Add(doneBefore)
	tr.sh.stats.read.Add(int64(len(kept)))
	tr.sh.stats.owned.Add(int64(len(offers)) + doneBefore)
	tr.offers = offers
	return offers, kept, true
}

// block stops reading shard m.Shard before m, a message in a shard its id
// does not belong to, for the rest of the term; the first such message
// has the ledger realigned (misplaced), on a goroutine of its own, which
// then ends the term's taking so that the log is opened again. Meanwhile
// the term reads its other shards on: a realign may wait for the group's
// low watermarks to move (the history's bound), and this holder's own
// marks can be what holds them (before, it stopped reading altogether,
// and the realign waited for it for as long as the term lasted).
func (tr *term) block(m *transport.Message) {
	if tr.blocked == nil {
		tr.blocked = make([]bool, len(tr.shards))
	}
	tr.blocked[m.Shard] = true
	if !tr.realigning {
		tr.realigning = true
		found := *m // the batch's message may be the reader's to reuse
		tr.realign.Go(func() { tr.misplaced(&found) })
	}
}

// prepare reads what the skip rule needs of older epochs for the offers
// below their marks (checkpoint.State.Prepare), retrying with backoff
// while the term takes: a task is never taken on a guess. It returns false
// when the term stopped taking.
func (tr *term) prepare(offers []offer) bool {
	var tasks []checkpoint.TaskAt
	for _, o := range offers {
		if tr.st.Below(o.m.Shard, o.m.Position) {
			tasks = append(tasks, checkpoint.TaskAt{Shard: o.m.Shard, Position: o.m.Position, ID: o.id})
		}
	}
	if len(tasks) == 0 {
		return true
	}
	for {
		err := tr.st.Prepare(tr.taking, tasks)
		if err == nil {
			return true
		}
		if !tr.fetched(fmt.Errorf("reading the checkpoints of older epochs: %w", err)) || tr.taking.Err() != nil {
			return false
		}
	}
}

// misplaced handles a message of an aligned log in a shard its id does not
// belong to by the ledger's count. When the source has grown shards since
// and the id belongs there by the new count, a producer has switched to it
// before this worker noticed: the term opens the log again at once (the
// ledger then cuts each old shard at its end, below which every index
// reads). Otherwise the producers do not place as the source declares (a
// producer in another language hashing keys its own way, or one still
// placing by the shard count before the log grew): it is said at Error
// and counted, and before this worker's marks can pass it the ledger
// moves to an epoch in which every index reads what its owner must
// (checkpoint.Store.Realign); the term then opens the log again, reading
// that message again. A realign that fails is tried again at the next
// open, which meets the message again.
func (tr *term) misplaced(m *transport.Message) {
	defer tr.stop()
	id, _ := tr.sh.user.id(m)
	cur := tr.st.Current
	ctx, cancel := context.WithTimeout(tr.taking, tr.sh.interval)
	defer cancel()
	ends := tr.info.Ends
	if info, err := tr.sh.src.Info(ctx); err == nil {
		if info.Aligned && info.Shards > cur.Aligned && id%uint64(info.Shards) == uint64(m.Shard) {
			tr.grew.Store(int64(info.Shards))
			return
		}
		ends = info.Ends
	}
	_, late := cur.Placed(m.Shard, m.Position, id)
	tr.sh.stats.misplaced.Add(1)
	why := "a task in a shard its id does not belong to: the log is not aligned as its source declares; the group now reads every shard (checkpoint epoch misaligned), so that nothing is skipped"
	if late {
		why = "a task in the shard its id had before the log grew: a producer still places by the old shard count; the group reads the old shards again up to their end now, so that nothing is skipped (switch every producer to the new count)"
	}
	tr.log.ErrorContext(tr.ctx, why, "destination", tr.info.Destination(m.Shard), "shard", m.Shard, "key", m.Key, "position", m.Position,
		"belongs_to_shard", id%uint64(cur.Aligned), "shards", cur.Aligned)
	req := checkpoint.RealignRequest{Epoch: cur.N, Replicas: tr.a.Replicas, Token: tr.a.Token,
		Shard: m.Shard, Position: m.Position, Key: m.Key, Late: late, Destination: tr.info.Destination(m.Shard), Ends: ends}
	realign := func() error {
		ctx, cancel := context.WithTimeout(tr.taking, tr.sh.interval)
		defer cancel()
		return tr.sh.ledger.Realign(ctx, req)
	}
	err := realign()
	// Until every index has opened the current epoch (an idle holder
	// learns of it at its writer's touch, within an interval), the realign
	// waits: nothing passes the task meanwhile.
	for errors.Is(err, checkpoint.ErrWait) && sleep(tr.taking, tr.sh.interval/20) {
		err = realign()
	}
	if err != nil && !errors.Is(err, checkpoint.ErrMoved) && !errors.Is(err, checkpoint.ErrWait) {
		tr.log.WarnContext(tr.ctx, "recording the misplaced task in the checkpoints failed; the next open meets it again", "err", err)
	}
	reason := "a misplaced task moved the checkpoints to a new epoch"
	tr.reopen.Store(&reason)
}

func (tr *term) noteBadShard(m *transport.Message) {
	tr.sh.stats.badShard.Add(1)
	if tr.sh.badShard.fail() {
		tr.log.WarnContext(tr.ctx, "message from a shard the source did not describe, or was not asked to read; not taken (a transport bug)", "shard", m.Shard, "shards", len(tr.shards))
	}
}

// takeIn makes the offers of a batch (ms, read whole) tasks and gives them
// to the runner. It returns false when the term stopped taking (the
// tasks it could not take are handed back) or intake was detached.
func (tr *term) takeIn(ms []*transport.Message, offers []offer) bool {
	now := monoNow()
	ts, at := tr.r.tasks(tr.tasks[:0], len(offers)), tr.at[:0]
	for i, o := range offers {
		tr.initTask(ts[i], o.m, o.id, o.err, now)
		at = append(at, o.i)
	}
	ok, back := tr.r.submit(ms, ts, at)
	tr.abandon(back)
	clear(ts)
	tr.tasks, tr.at = ts[:0], at[:0]
	return ok
}

// enterIntake enters the gate for intake's own calls into user code
// (Options.ID), as an attempt of intake's worker.
func (tr *term) enterIntake() bool {
	tr.r.w0.begin(nil)
	if !tr.gate.Enter() {
		if !tr.r.w0.end() {
			tr.lateReturn("", nil) // detached meanwhile: the drain counted it
		}
		return false
	}
	tr.sh.running.Add(1)
	return true
}

// leaveIntake leaves the gate; false when intake was detached meanwhile.
func (tr *term) leaveIntake() bool {
	tr.sh.running.Add(-1)
	tr.gate.Leave()
	if !tr.r.w0.end() {
		tr.lateReturn("", nil)
		return false
	}
	return true
}

// detachedReturn is how intake returns from Options.ID after it was
// detached: it gives back its counts and touches nothing else.
func (tr *term) detachedReturn() bool {
	tr.sh.running.Add(-1)
	tr.lateReturn("", nil)
	return false
}
