package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/transport"
)

// minWriteGap is the least time between two count-triggered checkpoint
// writes: at most 100 a second per worker.
const minWriteGap = 10 * time.Millisecond

// writer writes the term's marks every CheckpointInterval, or sooner
// when CheckpointEvery tasks have finished, on its own goroutine, so that
// intake never waits for the store. A write that meets a new epoch
// (another holder found the log rewound) stops the term's taking, so that
// serve drains and opens again.
func (tr *term) writer() {
	tick := time.NewTicker(tr.sh.opts.CheckpointInterval)
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
		if err := tr.writeMarks(false); errors.Is(err, checkpoint.ErrMoved) {
			tr.moved.Store(true)
			tr.stop()
			return
		}
	}
}

// writeMarks writes the marks that moved since the last write (one write
// at a time); with release, they are the term's last, and the write
// releases its index (the fenced handoff: a provisional successor may
// open the next epoch once every index is released). A failure is logged
// once per spell; the next write carries the same marks or later ones. It
// returns the write's error.
func (tr *term) writeMarks(release bool) error {
	tr.writeMu.Lock()
	defer tr.writeMu.Unlock()
	var cur *checkpoint.Epoch
	if tr.st != nil {
		cur = tr.st.Current
	}
	keep := func(s int, m checkpoint.Mark) checkpoint.Mark {
		if cur != nil {
			m = m.KeepBeyond(cur.Mark(s, tr.a.Index))
		}
		return m
	}
	marks := tr.r.marks(false, keep)
	if len(marks) == 0 && !release {
		// With nothing new, a holder still writes its marks once an
		// interval: the touch tells it of a new epoch (ErrLate,
		// ErrMoved), and puts its marks in the epoch's low watermarks
		// even where it has read nothing (a shard's low waits for every
		// index that reads it). A realign waits for both.
		if tr.st == nil || time.Since(tr.lastWrite) < tr.sh.interval {
			return nil
		}
		marks = tr.r.marks(true, keep)
	}
	if tr.st == nil {
		return nil
	}
	tr.lastWrite = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), tr.sh.interval)
	defer cancel()
	w := checkpoint.WriteRequest{Epoch: tr.st.Current.N, Token: tr.a.Token, Index: tr.a.Index, Replicas: tr.a.Replicas, Marks: marks, Release: release}
	err := tr.sh.ledger.Write(ctx, w)
	if err != nil && !errors.Is(err, checkpoint.ErrLate) {
		tr.sh.stats.checkpointFailures.Add(1)
		if tr.sh.writing.fail() {
			tr.log.WarnContext(tr.ctx, "checkpoint writes failing", "err", err)
		}
		return err
	}
	if n, lasted, ok := tr.sh.writing.end(); ok {
		tr.log.InfoContext(tr.ctx, "checkpoint writes recovered", "failures", n, "after", lasted)
	}
	tr.sh.stats.checkpoints.Add(1)
	var past bool
	tr.r.view(func(b *book) {
		b.wrote(marks)
		past = tr.pastCuts()
	})
	if err != nil {
		return err // ErrLate: written, and the epoch has moved on
	}
	if past {
		why := "the shards read for what lay below where the log grew are done with"
		if tr.reopen.CompareAndSwap(nil, &why) {
			tr.stop()
		}
	}
	tr.trim(ctx)
	return nil
}

// pastCuts reports (under the runner's lock) whether the term reads shards only for what
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
	tm, ok := tr.sh.src.(transport.Trimmer)
	now := time.Now().UnixNano()
	last := tr.sh.lastTrim.Load()
	if !ok || tr.a.Index != 0 || now-last < int64(tr.sh.interval) || !tr.sh.lastTrim.CompareAndSwap(last, now) {
		return
	}
	st, err := tr.sh.ledger.ReadLow(ctx)
	if err != nil || st.Current == nil || st.Current.N != tr.st.Current.N || st.Current.R != tr.a.Replicas {
		return
	}
	for s := range st.Current.Start {
		if err := tm.Trim(ctx, s, st.Current.Low(s)); err != nil {
			tr.log.WarnContext(tr.ctx, "trim failed", "shard", s, "err", err)
		}
	}
}
