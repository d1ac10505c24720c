package consumer

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
)

// A task runs twice only when a holder's work outran what the ledger
// knows of it: a handler overran its lease (the drain went on without
// it: drain.go announces those, with their keys and positions), a holder
// crashed or stalled past its lease before writing its marks, or the
// ledger was lost. This file keeps the two other halves of that promise:
//
//   - unwritten is what this worker finished and never wrote: an overdue
//     handler that returned nil after its term, or a term whose last
//     write failed. A later term of this worker skips those tasks
//     instead of running them again (the same worker often holds the
//     same index next).
//   - redo is a term's window of tasks that a former holder may have done
//     (it did not release its index, or the ledger was lost): each task
//     taken there is counted (Stats.Redone) and the term logs them in one
//     line when it ends.

// unwritten remembers, per worker, tasks finished and not written to the
// ledger. Its entries are few (one per shard of a term whose last write
// failed, one per overdue handler that returned nil), and pruned when a
// term opens above them.
type unwritten struct {
	n       atomic.Int64 // len(entries): the filter's cheap test
	mu      sync.Mutex
	entries []doneEntry
}

// doneEntry is tasks of one shard that one assignment finished: those its
// mark says are done from `from` on, or, when exact, the one at p.
type doneEntry struct {
	a     partition.Assignment
	s     int
	from  transport.Position
	m     checkpoint.Mark
	exact bool
}

// maxFinished bounds the entries kept: the oldest go first.
const maxFinished = 4096

func (e *doneEntry) covers(s int, p transport.Position, id uint64) bool {
	if e.s != s || !e.a.Owns(id) {
		return false
	}
	if e.exact {
		return p == e.m.Low
	}
	return !p.Less(e.from) && e.m.Done(p)
}

// below reports whether the entry covers nothing at or above from.
func (e *doneEntry) below(from transport.Position) bool {
	if e.exact {
		return e.m.Low.Less(from)
	}
	return !from.Less(e.m.High)
}

func (f *unwritten) add(es ...doneEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, es...)
	if over := len(f.entries) - maxFinished; over > 0 {
		f.entries = slices.Delete(f.entries, 0, over)
	}
	f.n.Store(int64(len(f.entries)))
}

// has reports whether this worker finished the task at p of shard s (id
// id) without writing it.
func (f *unwritten) has(s int, p transport.Position, id uint64) bool {
	if f.n.Load() == 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.entries {
		if f.entries[i].covers(s, p, id) {
			return true
		}
	}
	return false
}

// prune drops what a term opened at from (per shard) will never read,
// and everything of the shards in gone (their log was recreated: its
// positions are new tasks).
func (f *unwritten) prune(from []transport.Position, gone []int) {
	if f.n.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = slices.DeleteFunc(f.entries, func(e doneEntry) bool {
		return slices.Contains(gone, e.s) || (e.s < len(from) && e.below(from[e.s]))
	})
	f.n.Store(int64(len(f.entries)))
}

// unwritten keeps the term's marks, which its last write could not
// record: a later term of this worker skips what they say is done.
func (rec *recorder) unwritten() {
	if rec.st == nil {
		return
	}
	from := rec.st.From(rec.a.Index)
	var es []doneEntry
	rec.r.view(func(*book) {
		for s, sh := range rec.shards {
			if sh != nil && s < len(from) {
				es = append(es, doneEntry{a: rec.a, s: s, from: from[s], m: sh.mark()})
			}
		}
	})
	rec.sh.finished.add(es...)
}

// late keeps the task at p of shard s, which an overdue handler (or
// DeadLetter) finished after its term.
func (rec *recorder) late(s int, p transport.Position) {
	if rec.st != nil {
		rec.sh.finished.add(doneEntry{a: rec.a, s: s, m: checkpoint.Mark{Low: p}, exact: true})
	}
}

// redo is a term's window of tasks a former holder may have done.
type redo struct {
	own []transport.Position   // per shard, the log's end at open: the index's own tasks below it (nil: none)
	un  *checkpoint.Unreleased // the tasks of indexes not released when the epoch was made (nil: none)
	why string

	mu        sync.Mutex
	n         int64
	first     map[int]transport.Position
	last      map[int]transport.Position
	positions []string // the first redoShown
}

// redoShown is how many positions the term's line names; it gives each
// shard's first and last besides.
const redoShown = 100

// openRedo returns the term's window (nil when there is none): after a
// takeover of its index from a holder that did not release it, or a lost
// ledger, its own tasks up to the log's end now; in an epoch made while
// indexes of the former one were not released, their tasks.
func openRedo(st *checkpoint.State, ends []transport.Position) *redo {
	r := &redo{un: st.Current.Unreleased}
	switch {
	case st.Lost || st.Behind:
		r.own, r.why = ends, "the checkpoint ledger was lost or is behind"
	case st.TakenOver:
		r.own, r.why = ends, "this index's former holder did not release it (it crashed, stalled past its lease, or its last write failed)"
	case r.un != nil:
		r.why = "indexes of the former mapping were not released (their holders crashed or stalled past their leases)"
	default:
		return nil
	}
	return r
}

// at reports whether the task at p of shard s (id id) may have been done
// by a former holder, and counts it.
func (r *redo) at(s int, p transport.Position, id uint64) bool {
	if !(s < len(r.own) && p.Less(r.own[s])) && !r.un.MayRedo(s, p, id) {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first == nil {
		r.first, r.last = map[int]transport.Position{}, map[int]transport.Position{}
	}
	if _, ok := r.first[s]; !ok {
		r.first[s] = p
	}
	r.last[s] = p
	if len(r.positions) < redoShown {
		r.positions = append(r.positions, shardPos(s, p))
	}
	r.n++
	return true
}

// reportRedo logs the term's line of tasks redone, if any.
func (rec *recorder) reportRedo() {
	r := rec.redo
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == 0 {
		return
	}
	var ranges []string
	for s, p := range r.first {
		ranges = append(ranges, shardPos(s, p)+".."+r.last[s].String())
	}
	slices.Sort(ranges)
	rec.log.WarnContext(rec.ctx, "tasks a former holder may have done were taken again: each may have run twice",
		"why", r.why, "count", r.n, "ranges", ranges, "positions", r.positions)
}

// shardPos names a task's place: shard/position.
func shardPos(s int, p transport.Position) string { return strconv.Itoa(s) + "/" + p.String() }
