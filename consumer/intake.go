package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/partition"
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

// reading is a term's reading: intake's loop, the read-ahead, fetch
// retries, the ownership filter, the skip rule's reads of older epochs,
// and a misplaced message's realign. It is made once the term has opened
// (what it opened comes as arguments) and runs on intake's goroutine; it
// gives tasks to the runner (submit), asks the start window whether to
// read on, and tells the term's lifecycle only through reopen, grew and
// stop (the log must be opened again; taking ends).
type reading struct {
	sh     *shared
	a      partition.Assignment
	info   transport.Info
	log    *slog.Logger
	ctx    context.Context // the handlers' (what the log lines carry)
	taking context.Context // ends when the term stops taking
	win    *startWindow
	r      *runner
	run    *attempts // Options.ID runs as intake's attempt; tasks handed back

	// what the term opened: fixed for the reading's life. shards[s] is
	// nil where the term reads nothing; what a shardTrack holds belongs to
	// the book (under the runner's lock).
	st        *checkpoint.State // logs only
	shards    []*shardTrack
	redo      *redo // the tasks a former holder may have done (repeats.go); nil: none
	allShards bool  // an aligned source that is not a log, subscribed to every shard

	// the term's lifecycle, told that the log must be opened again (why),
	// that it grew, and when taking must end
	reopen     *atomic.Pointer[string]
	grew       *atomic.Int64
	stop       func()
	goroutines *sync.WaitGroup // the term's, which its close joins: the read-ahead runs on it

	done       chan struct{} // closed when intake returns
	fetch      ioBackoff     // fetches and the skip rule's reads
	blocked    []bool        // per shard, reading stopped before a misplaced message (nil: none)
	realigning bool          // a misplaced message's realign has begun
	// realign is that realign's goroutine (block): the drain waits for it
	// before the term's last write, so that the reopen it sets decides
	// whether that write releases the index.
	realign sync.WaitGroup
	offers  []offer // scratch: the owned messages of a batch
	tasks   []*task // scratch: their tasks
	at      []int   // scratch: their indexes in the batch
}

// intake reads and takes batches until the term stops taking: each batch
// through the ownership filter (filter) and into the task book (submit),
// whose runner runs them. It reads only while work may start
// (not within MinTaskTime of a deadline the renewal has not moved yet).
// Marks are written by the term's recorder (recorder.go), never waited for
// here. It runs on its own goroutine, which the drain detaches if user
// code it runs (Options.ID, or a task at Concurrency 1) outlives the term;
// it then returns touching nothing.
func (rd *reading) intake(r transport.Reader) {
	defer close(rd.done)
	next := rd.readNow(r)
	if rd.info.Log {
		next = rd.readAhead(r)
	}
	for rd.r.mayStart() && rd.r.runDue() {
		ms, ok := next()
		if !ok {
			return
		}
		if len(ms) == 0 {
			continue // a retry came due first
		}
		offers, kept, ok := rd.filter(ms)
		if !ok || !rd.takeIn(kept, offers) {
			return
		}
		if rd.sh.misaligned.Load() && !rd.allShards && rd.info.Aligned && !rd.info.Log {
			why := "a misplaced message: subscribing to every subject"
			rd.reopen.CompareAndSwap(nil, &why)
			return
		}
	}
}

// readNow reads a source that is not a log: it loses what is read and not
// taken, so nothing is read ahead, and a fetch lasts until intake must
// pause, or the next retry intake runs comes due (then it returns no
// messages, and intake looks again). ok is false when the term stopped
// taking.
func (rd *reading) readNow(r transport.Reader) func() ([]*transport.Message, bool) {
	return func() ([]*transport.Message, bool) {
		until := rd.win.closesAt()
		if d := rd.r.nextDue(); !d.IsZero() {
			until = earliest(until, d)
		}
		fctx, cancel := context.WithDeadline(rd.taking, until)
		ms, err := r.Fetch(fctx)
		cancel()
		return ms, rd.fetched(err)
	}
}

// readAhead reads a log one batch ahead of intake, on a goroutine of its
// own (a log keeps what is read and not taken: the marks never pass it),
// so that the transport's decoding and the handlers overlap. A read
// returns no messages when the next retry intake runs comes due first; ok
// is false when the term stopped taking.
func (rd *reading) readAhead(r transport.Reader) func() ([]*transport.Message, bool) {
	batches := make(chan []*transport.Message, 1)
	rd.goroutines.Go(func() {
		for rd.taking.Err() == nil {
			ms, err := r.Fetch(rd.taking)
			if !rd.fetched(err) {
				return
			}
			if len(ms) == 0 {
				continue
			}
			select {
			case batches <- ms:
			case <-rd.taking.Done():
				return
			}
		}
	})
	due := time.NewTimer(time.Hour)
	due.Stop()
	return func() ([]*transport.Message, bool) {
		var dueC <-chan time.Time
		if d := rd.r.nextDue(); !d.IsZero() {
			due.Reset(time.Until(d))
			defer due.Stop()
			dueC = due.C
		}
		select {
		case ms := <-batches:
			return ms, true
		case <-dueC:
			return nil, true
		case <-rd.taking.Done():
			return nil, false
		}
	}
}

// fetched accounts for a fetch's error: a failure is counted, logged once
// per spell and waited out with backoff. It returns false when the term
// stopped taking meanwhile.
func (rd *reading) fetched(err error) bool {
	switch {
	case err == nil:
		rd.fetch.ok(rd.taking, rd.log, "fetch recovered")
	case errors.Is(err, transport.ErrClosed):
		return false
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return rd.taking.Err() == nil
	default:
		return rd.fetch.wait(rd.taking, rd.log, "fetch failing; retrying", err)
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
func (rd *reading) filter(ms []*transport.Message) (offers []offer, kept []*transport.Message, ok bool) {
	userID := rd.sh.opts.ID != nil
	if userID && !rd.run.enterIntake(rd.r.w0) {
		return nil, nil, false
	}
	offers = rd.offers[:0]
	var notOwned, doneBefore int64
	var cur *checkpoint.Epoch
	if rd.st != nil {
		cur = rd.st.Current
	}
	kept = ms[:0] // in place: a message is kept at or before its index
	for _, m := range ms {
		if m.Shard < 0 || m.Shard >= len(rd.shards) || rd.shards[m.Shard] == nil {
			rd.noteBadShard(m)
			continue
		}
		if rd.blocked != nil && rd.blocked[m.Shard] {
			continue
		}
		id, err := rd.sh.user.id(m)
		if userID && rd.r.w0.detached() {
			return nil, nil, rd.run.detachedReturn()
		}
		if err != nil && rd.info.Aligned {
			// No id to place it by: it belongs to the index that reads its
			// shard (shard s is read by index s % Replicas, whatever the
			// epoch), so that exactly one worker reports it.
			id = uint64(m.Shard)
		}
		if cur != nil && err == nil {
			if placed, _ := cur.Placed(m.Shard, m.Position, id); !placed {
				rd.block(m)
				continue
			}
		}
		if cur == nil && err == nil && rd.info.Aligned && !rd.info.Log {
			rd.placedLossy(m, id)
		}
		kept = append(kept, m)
		i := len(kept) - 1
		if !rd.a.Owns(id) {
			notOwned++
			if m.Ack != nil {
				m.Ack()
			}
			continue
		}
		if rd.sh.finished.has(m.Shard, m.Position, id) { // this worker's, done in an earlier term and not written
			doneBefore++
			if m.Ack != nil {
				m.Ack()
			}
			continue
		}
		offers = append(offers, offer{m: m, id: id, err: err, i: i})
	}
	if userID && !rd.run.leaveIntake(rd.r.w0) {
		return nil, nil, false
	}
	if rd.st != nil {
		if !rd.prepare(offers) {
			return nil, nil, false
		}
		kept := offers[:0]
		for _, o := range offers {
			if rd.st.Done(o.m.Shard, o.m.Position, o.id) {
				doneBefore++
				if o.m.Ack != nil {
					o.m.Ack()
				}
				continue
			}
			kept = append(kept, o)
		}
		offers = kept
		if rd.redo != nil {
			var n int64
			for _, o := range offers {
				if rd.redo.at(o.m.Shard, o.m.Position, o.id) {
					n++
				}
			}
			rd.sh.stats.redone.Add(n)
		}
	}
	rd.sh.stats.notOwned.Add(notOwned)
	rd.sh.stats.doneBefore.Add(doneBefore)
	rd.sh.stats.read.Add(int64(len(kept)))
	rd.sh.stats.owned.Add(int64(len(offers)) + doneBefore)
	rd.offers = offers
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
func (rd *reading) block(m *transport.Message) {
	if rd.blocked == nil {
		rd.blocked = make([]bool, len(rd.shards))
	}
	rd.blocked[m.Shard] = true
	if !rd.realigning {
		rd.realigning = true
		found := *m // the batch's message may be the reader's to reuse
		rd.realign.Go(func() { rd.misplaced(&found) })
	}
}

// prepare reads what the skip rule needs of older epochs for the offers
// below their marks (checkpoint.State.Prepare), retrying with backoff
// while the term takes: a task is never taken on a guess. It returns false
// when the term stopped taking.
func (rd *reading) prepare(offers []offer) bool {
	var tasks []checkpoint.TaskAt
	for _, o := range offers {
		if rd.st.Below(o.m.Shard, o.m.Position) {
			tasks = append(tasks, checkpoint.TaskAt{Shard: o.m.Shard, Position: o.m.Position, ID: o.id})
		}
	}
	if len(tasks) == 0 {
		return true
	}
	for {
		err := rd.st.Prepare(rd.taking, tasks)
		if err == nil {
			return true
		}
		if !rd.fetched(fmt.Errorf("reading the checkpoints of older epochs: %w", err)) || rd.taking.Err() != nil {
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
func (rd *reading) misplaced(m *transport.Message) {
	defer rd.stop()
	id, _ := rd.sh.user.id(m)
	cur := rd.st.Current
	ctx, cancel := context.WithTimeout(rd.taking, rd.sh.interval)
	defer cancel()
	ends := rd.info.Ends
	if info, err := rd.sh.src.Info(ctx); err == nil {
		if info.Aligned && info.Shards > cur.Aligned && id%uint64(info.Shards) == uint64(m.Shard) {
			rd.grew.Store(int64(info.Shards))
			return
		}
		ends = info.Ends
	}
	_, late := cur.Placed(m.Shard, m.Position, id)
	rd.sh.stats.misplaced.Add(1)
	why := "a task in a shard its id does not belong to: the log is not aligned as its source declares; the group now reads every shard (checkpoint epoch misaligned), so that nothing is skipped"
	if late {
		why = "a task in the shard its id had before the log grew: a producer still places by the old shard count; the group reads the old shards again up to their end now, so that nothing is skipped (switch every producer to the new count)"
	}
	rd.log.ErrorContext(rd.ctx, why, "destination", rd.info.Destination(m.Shard), "shard", m.Shard, "key", m.Key, "position", m.Position,
		"belongs_to_shard", id%uint64(cur.Aligned), "shards", cur.Aligned)
	req := checkpoint.RealignRequest{Epoch: cur.N, Replicas: rd.a.Replicas, Token: rd.a.Token,
		Shard: m.Shard, Position: m.Position, Key: m.Key, Late: late, Destination: rd.info.Destination(m.Shard), Ends: ends}
	realign := func() error {
		ctx, cancel := context.WithTimeout(rd.taking, rd.sh.interval)
		defer cancel()
		return rd.sh.ledger.Realign(ctx, req)
	}
	err := realign()
	// Until every index has opened the current epoch (an idle holder
	// learns of it at its writer's touch, within an interval), the realign
	// waits: nothing passes the task meanwhile.
	for errors.Is(err, checkpoint.ErrWait) && sleep(rd.taking, rd.sh.interval/20) {
		err = realign()
	}
	if err != nil && !errors.Is(err, checkpoint.ErrMoved) && !errors.Is(err, checkpoint.ErrWait) {
		rd.log.WarnContext(rd.ctx, "recording the misplaced task in the checkpoints failed; the next open meets it again", "err", err)
	}
	reason := "a misplaced task moved the checkpoints to a new epoch"
	rd.reopen.Store(&reason)
}

func (rd *reading) noteBadShard(m *transport.Message) {
	rd.sh.stats.badShard.Add(1)
	if rd.sh.badShard.fail() {
		rd.log.WarnContext(rd.ctx, "message from a shard the source did not describe, or was not asked to read; not taken (a transport bug)", "shard", m.Shard, "shards", len(rd.shards))
	}
}

// takeIn makes the offers of a batch (ms, read whole) tasks and gives them
// to the runner. It returns false when the term stopped taking (the
// tasks it could not take are handed back) or intake was detached.
func (rd *reading) takeIn(ms []*transport.Message, offers []offer) bool {
	now := monoNow()
	ts, at := rd.r.tasks(rd.tasks[:0], len(offers)), rd.at[:0]
	for i, o := range offers {
		rd.initTask(ts[i], o.m, o.id, o.err, now)
		at = append(at, o.i)
	}
	ok, back := rd.r.submit(ms, ts, at)
	rd.run.abandon(back)
	clear(ts)
	rd.tasks, rd.at = ts[:0], at[:0]
	return ok
}
