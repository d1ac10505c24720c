package consumer

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/transport"
)

// shardTrack knows, for one shard of the index held, the tasks taken and
// not finished, in position order, and where reading has got to. Its
// watermark is the position below which every task of the index is done:
// the first unfinished task, or the position after the last message read.
// Its mark (what a checkpoint records) adds that everything between the
// watermark and the position after the last message read is done but the
// unfinished tasks: a task cut off at a handover, or stuck failing, costs
// only itself. Finished tasks leave the list at once, so its size is the
// number of unfinished tasks (at most MaxPending held whole, and
// MaxWaiting light), however long the first of them keeps failing.
type shardTrack struct {
	next       transport.Position // after the last message read
	head, tail *task              // unfinished, in position order
	n          int
	written    checkpoint.Mark // the mark last written
}

func (s *shardTrack) add(t *task) {
	t.before, t.after = s.tail, nil
	if s.tail != nil {
		s.tail.after = t
	} else {
		s.head = t
	}
	s.tail = t
	s.n++
}

func (s *shardTrack) remove(t *task) {
	if t.before != nil {
		t.before.after = t.after
	} else {
		s.head = t.after
	}
	if t.after != nil {
		t.after.before = t.before
	} else {
		s.tail = t.before
	}
	t.before, t.after = nil, nil
	s.n--
}

func (s *shardTrack) watermark() transport.Position {
	if s.head != nil {
		return s.head.pos
	}
	return s.next
}

// mark is what a checkpoint records of the shard: the watermark, and above
// it every unfinished task (Options.MaxPending bounds them), so that a
// handover does again only what was not finished.
func (s *shardTrack) mark() checkpoint.Mark {
	if s.head == nil {
		return checkpoint.Mark{Low: s.next, High: s.next}
	}
	m := checkpoint.Mark{Low: s.head.pos, High: s.next}
	if s.n > 1 {
		m.Undone = make([]transport.Position, 0, s.n-1)
	}
	for t := s.head.after; t != nil; t = t.after {
		m.Undone = append(m.Undone, t.pos)
	}
	return m
}

func sameMark(a, b checkpoint.Mark) bool {
	return a.Low == b.Low && a.High == b.High && slices.Equal(a.Undone, b.Undone)
}

// finish takes a finished task out of its shard's unfinished list; the
// CheckpointEvery'th since the last write asks the writer for one.
func (tr *term) finish(t *task) {
	tr.mu.Lock()
	tr.shards[t.shard].remove(t)
	tr.since++
	full := tr.since >= tr.opts.CheckpointEvery
	tr.mu.Unlock()
	if full {
		select {
		case tr.flush <- struct{}{}:
		default:
		}
	}
}

// minWriteGap is the least time between two count-triggered checkpoint
// writes: at most 100 a second per worker.
const minWriteGap = 10 * time.Millisecond

// writer writes the term's marks every CheckpointInterval, or sooner
// when CheckpointEvery tasks have finished, on its own goroutine, so that
// intake never waits for the store. A write that meets a new epoch
// (another holder found the log rewound) stops the term's taking, so that
// serve drains and opens again.
func (tr *term) writer() {
	tick := time.NewTicker(tr.opts.CheckpointInterval)
	defer tick.Stop()
	var last time.Time
	for {
		select {
		case <-tick.C:
		case <-tr.flush:
			// Count-triggered writes are at most one per minWriteGap, so a
			// fast log does not turn every thousand tasks into a script
			// call on the store.
			if wait := minWriteGap - time.Since(last); wait > 0 && !sleep(tr.taking, wait) {
				return
			}
		case <-tr.taking.Done():
			return // the drain writes the last ones
		case <-tr.done:
			return
		}
		last = time.Now()
		if err := tr.writeMarks(); errors.Is(err, checkpoint.ErrMoved) {
			tr.moved.Store(true)
			tr.stop()
			return
		}
	}
}

// writeMarks writes the marks that moved since the last write (one write
// at a time). A failure is logged once per spell; the next write carries
// the same marks or later ones. It returns the write's error.
func (tr *term) writeMarks() error {
	tr.writeMu.Lock()
	defer tr.writeMu.Unlock()
	tr.mu.Lock()
	tr.behindIntake() // what is behind intake in a batch counts now, not only when the batch ends
	marks := map[int]checkpoint.Mark{}
	for s, sh := range tr.shards {
		if sh == nil {
			continue // not read: the index has no mark there
		}
		m := sh.mark()
		if tr.st != nil && tr.st.Current != nil {
			m = m.KeepBeyond(tr.st.Current.Mark(s, tr.a.Index))
		}
		if !sameMark(m, sh.written) {
			marks[s] = m
		}
	}
	tr.since = 0
	tr.mu.Unlock()
	if len(marks) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), tr.interval)
	defer cancel()
	w := checkpoint.WriteRequest{Epoch: tr.st.Current.N, Token: tr.a.Token, Index: tr.a.Index, Replicas: tr.a.Replicas, Marks: marks}
	err := tr.ledger.Write(ctx, w)
	if err != nil && !errors.Is(err, checkpoint.ErrLate) {
		tr.stats.checkpointFailures.Add(1)
		if tr.writing.fail() {
			tr.log.WarnContext(tr.ctx, "checkpoint writes failing", "err", err)
		}
		return err
	}
	if n, lasted, ok := tr.writing.end(); ok {
		tr.log.InfoContext(tr.ctx, "checkpoint writes recovered", "failures", n, "after", lasted)
	}
	tr.stats.checkpoints.Add(1)
	tr.mu.Lock()
	for s, m := range marks {
		tr.shards[s].written = m
	}
	past := tr.pastCuts()
	tr.mu.Unlock()
	if err != nil {
		return err // ErrLate: written, and the epoch has moved on
	}
	if past {
		why := "the shards read for what lay below where the log grew are done with"
		if tr.again.CompareAndSwap(nil, &why) {
			tr.stop()
		}
	}
	tr.trim(ctx)
	return nil
}

// pastCuts reports (under mu) whether the term reads shards only for what
// lies below their cut (the log grew: checkpoint.Epoch.Transitional) and
// its marks have passed every one of those cuts: opened again, it reads
// only the shards its index can own tasks in.
func (tr *term) pastCuts() bool {
	if tr.st == nil || tr.st.Current == nil {
		return false
	}
	cur, some := tr.st.Current, false
	for s, sh := range tr.shards {
		if sh == nil || !cur.Transitional(s, tr.a.Index) {
			continue
		}
		if sh.written.Low.Less(cur.Cut[s]) {
			return false
		}
		some = true
	}
	return some
}

// trim lets a log that can drop finished entries (transport.Trimmer) drop
// those below the current epoch's low watermark: no holder reads below
// its own mark, and a new epoch starts at their lowest. Index 0's holder
// does it, at most once an interval.
func (tr *term) trim(ctx context.Context) {
	tm, ok := tr.src.(transport.Trimmer)
	now := time.Now().UnixNano()
	last := tr.lastTrim.Load()
	if !ok || tr.a.Index != 0 || now-last < int64(tr.interval) || !tr.lastTrim.CompareAndSwap(last, now) {
		return
	}
	st, err := tr.ledger.ReadLow(ctx)
	if err != nil || st.Current == nil || st.Current.N != tr.st.Current.N || st.Current.R != tr.a.Replicas {
		return
	}
	for s := range st.Current.Start {
		if err := tm.Trim(ctx, s, st.Current.Low(s)); err != nil {
			tr.log.WarnContext(tr.ctx, "trim failed", "shard", s, "err", err)
		}
	}
}
