package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/nandi-go/nandi/transport"
)

// offer is an owned message of a batch, as intake hands it to the
// scheduler: its task id, the permanent failure intake found (Message.Err,
// an Options.ID error), and its index in the batch.
type offer struct {
	m   *transport.Message
	id  uint64
	err error
	i   int
}

// intake reads and takes batches until the term stops taking: each batch
// through the ownership filter (filter) and into the scheduler (submit),
// which decides how its tasks run. It reads only while work may start
// (not within DrainTimeout of a deadline the renewal has not moved yet).
// Marks are written by the term's writer (marks.go), never waited for
// here. It runs on its own goroutine, which the drain detaches if user
// code it runs (Options.ID, or a task inline) outlives the term; it then
// returns touching nothing.
func (tr *term) intake(r transport.Reader) {
	defer close(tr.intakeDone)
	next := tr.readNow(r)
	if tr.info.Log {
		next = tr.readAhead(r)
	}
	for tr.s.runDue() && tr.mayStart() {
		ms, ok := next()
		if !ok {
			return
		}
		if len(ms) == 0 {
			continue // a retry came due first
		}
		offers, ok := tr.filter(ms)
		if !ok || !tr.s.submit(ms, offers) {
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
		if d := tr.s.nextDue(); !d.IsZero() {
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
		if d := tr.s.nextDue(); !d.IsZero() {
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
// detached like a handler. It returns false when intake was detached or
// the term is draining.
func (tr *term) filter(ms []*transport.Message) ([]offer, bool) {
	userID := tr.opts.ID != nil
	if userID && !tr.s.enterIntake() {
		return nil, false
	}
	offers := tr.offers[:0]
	var notOwned, doneBefore int64
	for i, m := range ms {
		if m.Shard < 0 || m.Shard >= len(tr.shards) || tr.shards[m.Shard] == nil {
			tr.noteBadShard(m)
			continue
		}
		id, err := tr.taskID(m)
		if userID && tr.s.w0.detached() {
			return nil, tr.s.detachedReturn()
		}
		if !tr.a.Owns(id) {
			notOwned++
			if m.Ack != nil {
				m.Ack()
			}
			continue
		}
		if tr.st != nil && tr.st.Done(m.Shard, m.Position, id) {
			doneBefore++
			if m.Ack != nil {
				m.Ack()
			}
			continue
		}
		offers = append(offers, offer{m: m, id: id, err: err, i: i})
	}
	tr.stats.notOwned.Add(notOwned)
	tr.stats.doneBefore.Add(doneBefore)
	tr.stats.read.Add(int64(len(ms)))
	tr.stats.owned.Add(int64(len(offers)) + doneBefore)
	tr.offers = offers
	if userID && !tr.s.leaveIntake() {
		return nil, false
	}
	return offers, true
}

func (tr *term) noteBadShard(m *transport.Message) {
	tr.stats.badShard.Add(1)
	if tr.badShard.fail() {
		tr.log.WarnContext(tr.ctx, "message from a shard the source did not describe, or was not asked to read; not taken (a transport bug)", "shard", m.Shard, "shards", len(tr.shards))
	}
}

// taskID returns the task id of m and, when m cannot become a task (the
// source said so, or Options.ID failed or panicked), a permanent error;
// its owner is then ID(m.Key).
func (sh *shared) taskID(m *transport.Message) (uint64, error) {
	if m.Err != nil {
		return ID(m.Key), Permanent(m.Err)
	}
	if sh.opts.ID == nil {
		return ID(m.Key), nil
	}
	id, err := sh.callID(m)
	if err != nil {
		return ID(m.Key), Permanent(err)
	}
	return id, nil
}

// advance moves reading past the first n messages of ms (under mu): the
// one place reading moves, called as messages come behind intake (the
// scheduler's hand-off, the end of an inline batch) and for the part of an
// inline batch behind intake (behindIntake).
func (tr *term) advance(ms []*transport.Message, n int) {
	if !tr.info.Log {
		return
	}
	for _, m := range ms[:n] {
		if m.Shard >= 0 && m.Shard < len(tr.shards) && tr.shards[m.Shard] != nil {
			tr.shards[m.Shard].next = m.Position.Next()
		}
	}
}

// behindIntake advances reading over the part of the batch intake runs
// inline that is behind it (under mu), and reports whether intake is in
// the middle of one and has not got through it.
func (tr *term) behindIntake() (midBatch bool) {
	ms := tr.curBatch
	if ms == nil {
		return false
	}
	n := int(tr.batchDone.Load())
	tr.advance(ms, n)
	return n < len(ms)
}
