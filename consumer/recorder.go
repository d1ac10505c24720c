package consumer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
)

// minWriteGap is the least time between two count-triggered checkpoint
// writes: at most 100 a second per worker.
const minWriteGap = 10 * time.Millisecond

// record writes the term's marks while it takes work (recorder.
// writeEvery), and ends its taking when the log must be opened again.
func (tr *term) record() {
	moved, pastCuts := tr.rec.writeEvery(tr.taking, tr.done)
	switch {
	case moved:
		tr.moved.Store(true)
		tr.stop()
	case pastCuts:
		tr.reopenPastCuts()
	}
}

// reopenPastCuts ends the term's taking so that the log is opened again:
// the shards it reads only for what lay below their cuts are done with.
func (tr *term) reopenPastCuts() {
	why := "the shards read for what lay below where the log grew are done with"
	if tr.reopen.CompareAndSwap(nil, &why) {
		tr.stop()
	}
}

// recorder is a term's recording: it writes what the term finished to
// the checkpoint ledger (the book's marks: every CheckpointInterval,
// sooner after CheckpointEvery tasks, and the term's last, which may
// release its index), trims the log below the group's low watermark,
// waits for every index's readiness in a fenced handoff (handover.go),
// and keeps this worker's word on repeats (repeats.go) and ages
// (ages.go). It owns its state: what the term opened (given once by
// opened, before it writes) and its writes' own. It reads the marks from
// the book through the runner, and tells the term what it met by its
// returns; it stops nothing itself.
type recorder struct {
	sh  *shared
	a   partition.Assignment
	ctx context.Context // the handlers': its log lines carry the term
	log *slog.Logger
	r   *runner // the book's marks

	// Set by opened, before the first write, and not changed after; nil
	// for a source that is not a log (the recorder then writes nothing).
	st     *checkpoint.State
	shards []*shardTrack // nil where the term reads nothing; their marks are the book's
	redo   *redo         // the tasks a former holder may have done (nil: none)

	flush chan struct{} // capacity 1: CheckpointEvery tasks finished (the runner says)

	mu        sync.Mutex // one write at a time
	lastWrite time.Time  // the last write's start (under mu)
}

func newRecorder(sh *shared, a partition.Assignment, ctx context.Context, log *slog.Logger) *recorder {
	return &recorder{sh: sh, a: a, ctx: ctx, log: log, flush: make(chan struct{}, 1)}
}

// opened gives the recorder what the term opened: the ledger's state,
// the shards read, and its window of possible repeats.
func (rec *recorder) opened(st *checkpoint.State, shards []*shardTrack, redo *redo) {
	rec.st, rec.shards, rec.redo = st, shards, redo
}

// writeEvery writes the marks every CheckpointInterval, or sooner when
// CheckpointEvery tasks have finished (on the term's goroutine for it, so
// that intake never waits for the store), until taking ends or done is
// closed (the drain writes the last ones). It returns early when a write
// met a new epoch (moved: another holder found the log rewound) or the
// marks passed every cut the term reads below (pastCuts): the term must
// open the log again.
func (rec *recorder) writeEvery(taking context.Context, done <-chan struct{}) (moved, pastCuts bool) {
	tick := time.NewTicker(rec.sh.opts.CheckpointInterval)
	defer tick.Stop()
	var last time.Time
	for {
		select {
		case <-tick.C:
		case <-rec.flush:
			// Count-triggered writes are at most one per minWriteGap, so a
			// fast log does not turn every thousand tasks into a script
			// call on the store.
			if wait := minWriteGap - time.Since(last); wait > 0 && !sleep(taking, wait) {
				return false, false
			}
		case <-taking.Done():
			return false, false
		case <-done:
			return false, false
		}
		last = time.Now()
		past, err := rec.write(false)
		if errors.Is(err, checkpoint.ErrMoved) {
			return true, false
		}
		if past {
			return false, true
		}
	}
}

// write writes the marks that moved since the last write (one write at
// a time); with release, they are the term's last, and the write
// releases its index (the fenced handoff: a provisional successor may
// open the next epoch once every index is released). A failure is logged
// once per spell; the next write carries the same marks or later ones. It
// returns the write's error, and whether the marks have passed every cut
// the term reads below (pastCuts).
func (rec *recorder) write(release bool) (pastCuts bool, err error) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.st == nil {
		return false, nil
	}
	cur := rec.st.Current
	keep := func(s int, m checkpoint.Mark) checkpoint.Mark {
		if cur != nil {
			m = m.KeepBeyond(cur.Mark(s, rec.a.Index))
		}
		return m
	}
	marks := rec.r.marks(false, keep)
	if len(marks) == 0 && !release {
		// With nothing new, a holder still writes its marks once an
		// interval: the touch tells it of a new epoch (ErrLate,
		// ErrMoved), and puts its marks in the epoch's low watermarks
		// even where it has read nothing (a shard's low waits for every
		// index that reads it). A realign waits for both.
		if time.Since(rec.lastWrite) < rec.sh.interval {
			return false, nil
		}
		marks = rec.r.marks(true, keep)
	}
	rec.lastWrite = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), rec.sh.interval)
	defer cancel()
	w := checkpoint.WriteRequest{Epoch: cur.N, Token: rec.a.Token, Index: rec.a.Index, Replicas: rec.a.Replicas, Marks: marks, Release: release}
	err = rec.sh.ledger.Write(ctx, w)
	if err != nil && !errors.Is(err, checkpoint.ErrLate) {
		rec.sh.stats.checkpointFailures.Add(1)
		if rec.sh.writing.fail() {
			rec.log.WarnContext(rec.ctx, "checkpoint writes failing", "err", err)
		}
		return false, err
	}
	if n, lasted, ok := rec.sh.writing.end(); ok {
		rec.log.InfoContext(rec.ctx, "checkpoint writes recovered", "failures", n, "after", lasted)
	}
	rec.sh.stats.checkpoints.Add(1)
	rec.r.view(func(b *book) {
		b.wrote(marks)
		pastCuts = rec.pastCuts()
	})
	if err != nil {
		return false, err // ErrLate: written, and the epoch has moved on
	}
	rec.trim(ctx)
	return pastCuts, nil
}

// pastCuts reports (under the runner's lock) whether the term reads shards only for what
// lies below their cut (the log grew: checkpoint.Epoch.Transitional) and
// its marks have passed every one of those cuts: opened again, it reads
// only the shards its index can own tasks in.
func (rec *recorder) pastCuts() bool {
	if rec.st == nil || rec.st.Current == nil {
		return false
	}
	cur, some := rec.st.Current, false
	for s, sh := range rec.shards {
		if sh == nil || !cur.Transitional(s, rec.a.Index) {
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
func (rec *recorder) trim(ctx context.Context) {
	tm, ok := rec.sh.src.(transport.Trimmer)
	now := time.Now().UnixNano()
	last := rec.sh.lastTrim.Load()
	if !ok || rec.a.Index != 0 || now-last < int64(rec.sh.interval) || !rec.sh.lastTrim.CompareAndSwap(last, now) {
		return
	}
	st, err := rec.sh.ledger.ReadLow(ctx)
	if err != nil || st.Current == nil || st.Current.N != rec.st.Current.N || st.Current.R != rec.a.Replicas {
		return
	}
	for s := range st.Current.Start {
		if err := tm.Trim(ctx, s, st.Current.Low(s)); err != nil {
			rec.log.WarnContext(rec.ctx, "trim failed", "shard", s, "err", err)
		}
	}
}
