package checkpoint

import (
	"context"
	"slices"
	"time"

	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
)

// Store is a group's ledger, as package consumer uses it. Redis is the
// implementation; a Store must give the same guarantees (see the package
// documentation).
type Store interface {
	// Open opens the ledger for a holder of a lease, atomically: it
	// creates the next epoch when the holder's replicas differ from the
	// current epoch's (or a shard was rewound, or an aligned log grew
	// shards), and fences the writes of older holders of the index. It
	// returns the epochs' heads, the holder's marks and the marks of older
	// epochs that State.Done needs for the holder's tasks. It returns
	// ErrStale when a newer mapping owns the ledger, ErrShrunk when an
	// aligned source has fewer shards than the ledger's log, and ErrHeld
	// when a provisional term may not open yet.
	Open(ctx context.Context, req OpenRequest) (*State, error)
	// Write records a holder's marks, fenced by epoch (ErrMoved; ErrLate
	// when they were recorded but the epoch has moved on) and by token
	// (ErrFenced). A shard's mark never goes backwards. With no marks it
	// only checks the epoch: a holder with nothing new to write learns
	// that way of a new one (a realign waits for every index to open it:
	// ErrWait).
	Write(ctx context.Context, w WriteRequest) error
	// Realign records that a holder of an aligned log read a task in a
	// shard its id does not belong to (Epoch.Placed), before its marks
	// pass it: the ledger moves to an epoch whose every index reads what
	// the task's owner must (ErrMoved when the epoch had moved on
	// already; ErrWait, nothing written, while an index has not opened
	// the current epoch: try again).
	Realign(ctx context.Context, req RealignRequest) error
	// Read returns the ledger as it is, every mark of it, without changing
	// it; Current is nil for a group with no ledger. For tools.
	Read(ctx context.Context) (*State, error)
	// Ready says that the holder of an index is ready to hand its share
	// over (the fenced handoff's first phase: its term is kept to its cap
	// because the group changed), and returns how many of the epoch's held
	// indexes are ready: when all are, each drains and releases
	// (WriteRequest.Release); while one is not (killed, stopped), the
	// others serve their shares to their caps. Idempotent, so a holder
	// polls with it. ErrMoved when the epoch is no longer current, ErrFenced
	// when the caller is not the index's newest opener.
	Ready(ctx context.Context, req ReadyRequest) (ready, held int, err error)
	// ReadLow returns the epochs' heads and the current epoch's low
	// watermarks (Epoch.Low), without marks: what a worker's lag, a trim
	// and a sink's watermark need, at a cost that does not grow with the
	// group's size.
	ReadLow(ctx context.Context) (*State, error)
}

// RealignRequest is what a holder found: a task at Position of Shard,
// with Key, that Epoch.Placed refused (Late: it belongs there by the count
// before the log grew).
type RealignRequest struct {
	Epoch    int64 // the holder's epoch
	Replicas int   // its replicas
	Token    int64 // its token
	Shard    int
	Position transport.Position
	Key      string
	Late     bool
	// Destination names the shard's stream, topic or subject, for people.
	Destination string
	// Ends is where each shard of the log ends now: a late producer's cut
	// moves up to it.
	Ends []transport.Position
}

// ReadyRequest names a holder ready to hand its index over (Store.Ready).
type ReadyRequest struct {
	Epoch    int64 // the epoch it opened
	Token    int64 // its lease's token
	Index    int   // its index
	Replicas int   // its lease's replicas
}

// OpenRequest is what a holder opens the ledger with.
type OpenRequest struct {
	Replicas int   // the lease's replicas
	Index    int   // the lease's index
	Token    int64 // the lease's fencing token
	// Origin is where each shard starts for a group with no ledger (the
	// log's beginning, or its end with consumer.Options.StartAtEnd); its
	// length is the number of shards.
	Origin []transport.Position
	// Seen is the highest epoch this worker has seen (0: none) and
	// SeenStart that epoch's start: a ledger that is gone, though the
	// worker saw it, is recreated from SeenStart and reported
	// (State.Lost), never from Origin.
	Seen      int64
	SeenStart []transport.Position
	// Aligned says the source's shard s holds only tasks whose id has
	// id % len(Origin) == s (transport.Info.Aligned): a first epoch Open
	// creates records it (Epoch.Aligned). When an aligned log has more
	// shards than the ledger's, Open creates an epoch aligned to the new
	// count, each old shard cut at its end (Ends): what lies below was
	// placed by the old count, and every index reads it (Epoch.Reads).
	Aligned bool
	// Ends is where each shard of the log ends now (transport.Info.Ends).
	Ends []transport.Position
	// Provisional says the lease's term is provisional (partition's
	// fenced handoff: Term.Provisional): it may create the next epoch only
	// when every index of the current one has been released by its newest
	// opener (WriteRequest.Release) and the current epoch knows who serves
	// it (it was created for new replicas, not after a loss, a reset or a
	// realignment); it may join an epoch of its own replicas only where its
	// index was released. Otherwise Open returns ErrHeld and writes
	// nothing: the caller waits and opens again, or for its term to be
	// confirmed (an ordinary lease, which opens as before).
	Provisional bool
	// Rewound lists shards whose log went back below the marks (a topic or
	// stream deleted and created again: its positions start over). Open
	// then creates the next epoch, with those shards starting at Origin
	// and every older epoch's marks of them dropped, so that nothing of the
	// new log is skipped; the other holders' writes meet ErrMoved and they
	// open again.
	Rewound []int
}

// WriteRequest is one holder's marks: every task of Index in shard s is
// done as Marks[s] says.
type WriteRequest struct {
	Epoch int64 // the epoch the marks belong to (Epoch.N)
	Token int64 // the writer's fencing token: a newer one for the index refuses it (ErrStale)
	Index int   // the writer's index in the epoch
	// Replicas is the replicas of the lease the marks were made under
	// (0: not checked, as before it was added). An epoch is known by its
	// number and its mapping: a ledger lost and created again can reuse a
	// number under other replicas, and a former holder's late write into
	// it is refused as moved (ErrMoved) instead of being read as another
	// index's progress.
	Replicas int
	Marks    map[int]Mark // per shard, the index's mark there
	// Release says these are the term's final marks: the holder has
	// drained and serves the index no more. Written in the same call as
	// the marks, and only by the index's newest opener of the epoch, it
	// lets a provisional term of the next mapping open the next epoch
	// (OpenRequest.Provisional) from marks that are final.
	Release bool
}

// Mark is one index's progress in one shard: every task of the index below
// Low is done, and every task after Low and before High is done except
// those at the positions Undone. Low itself is not done (it is where
// reading starts again). High is Low when nothing beyond Low is recorded.
type Mark struct {
	Low, High transport.Position
	Undone    []transport.Position // ascending, each strictly between Low and High
}

// Done reports whether the task at p is done by this mark.
func (m Mark) Done(p transport.Position) bool {
	if p.Less(m.Low) {
		return true
	}
	if !m.Low.Less(p) || !p.Less(m.High) {
		return false
	}
	_, undone := slices.BinarySearchFunc(m.Undone, p, transport.Position.Compare)
	return !undone
}

// Unreleased names the indexes of an epoch that a new one was made from
// (by a term that was not provisional, an interval after the change)
// although they had not released it: their holders crashed, stalled past
// their leases or failed their last write, so tasks they
// owned past their last marks may have been done and may be done again
// in the new epoch, up to each shard's end when it was made (Ends).
type Unreleased struct {
	Replicas int                  // the former epoch's replicas
	Indexes  []int                // its indexes not released, ascending
	Ends     []transport.Position // per shard, the log's end when the new epoch was made
}

// MayRedo reports whether a task at p of shard s with id id may have been
// done by a holder that did not release it: its owner was one of the
// indexes and it lies below that shard's end.
func (u *Unreleased) MayRedo(s int, p transport.Position, id uint64) bool {
	if u == nil || s >= len(u.Ends) || !p.Less(u.Ends[s]) {
		return false
	}
	_, ok := slices.BinarySearch(u.Indexes, int(id%uint64(u.Replicas)))
	return ok
}

// Epoch is one mapping's checkpoints.
type Epoch struct {
	N     int64                // epoch number, from 1
	R     int                  // replicas of the mapping
	Token int64                // token of the lease that created it
	Start []transport.Position // per shard, where the epoch began
	// Marks are the marks read; others are {Start, Start}. Open reads the
	// opener's own, State.Prepare those of older epochs that its tasks
	// need, and Read every mark.
	Marks  map[Slot]Mark
	Tokens map[Slot]int64 // token of each mark's writer
	Opened map[int]int64  // per index, the newest token that opened the epoch (Read only)
	// Aligned is the shard count the epoch's log is aligned to (0: not
	// aligned): shard s < Aligned holds only tasks whose id has
	// id % Aligned == s from Cut[s] on (from Start when there is no cut), so
	// only the indexes that can own such ids (CanOwnIn) read it there and
	// count toward its low watermark.
	Aligned int
	// Cut is, per shard, where the log grew: below it the shard holds
	// tasks placed by an older count too, so every index reads it (Reads)
	// until its mark has passed the cut. Absent: none.
	Cut map[int]transport.Position
	// Was is the aligned count before the log last grew (0: none): a task
	// past a cut in the shard its id had by Was comes from a producer that
	// still places by it (Placed).
	Was int
	// High is, per shard, the highest High any mark of the epoch has
	// recorded (Start when none).
	High []transport.Position
	// Why is why the epoch was created: "first", "lost", "replicas",
	// "rewound", "grew", "unaligned", "late", "misaligned" or "reset".
	Why string
	// ResetAt is when Redis.Reset created the epoch (zero: a worker's
	// open did).
	ResetAt time.Time
	// Fenced says the epoch knows who serves it (it was created for new
	// replicas): a provisional term of the next mapping may open the next
	// epoch once every index has released it (OpenRequest.Provisional);
	// Held is how many indexes have not (opened and not released), Ready
	// how many of those are ready to hand over (Store.Ready).
	Fenced bool
	Held   int
	Ready  int
	// Unreleased is what the epoch was made from that was never
	// released (nil: nothing).
	Unreleased *Unreleased

	lows []transport.Position // per shard, the low watermark the store computed (Read, ReadLow)
	gone map[int]bool         // shards rewound since: their marks say nothing
}

// Slot names one index's place in one shard.
type Slot struct {
	Shard int // the shard of the log
	Index int // the lease's index
}

// Mark returns the mark of index k in shard s, as read ({Start, Start}
// when it was not).
func (e *Epoch) Mark(s, k int) Mark {
	if m, ok := e.Marks[Slot{s, k}]; ok {
		return m
	}
	var p transport.Position
	if s < len(e.Start) {
		p = e.Start[s]
	}
	return Mark{Low: p, High: p}
}

// At returns where index k reads shard s from: its mark's Low.
func (e *Epoch) At(s, k int) transport.Position { return e.Mark(s, k).Low }

// CanOwnIn reports whether index k of the epoch can own tasks placed in
// shard s by the epoch's aligned count: always, unless the log is aligned
// (Aligned) and s is below its count.
func (e *Epoch) CanOwnIn(s, k int) bool {
	if e.Aligned == 0 || s >= e.Aligned {
		return true
	}
	return partition.Assignment{Index: k, Replicas: e.R}.CanOwnIn(s, e.Aligned)
}

// Reads reports whether index k reads shard s, by its mark there (which
// must have been read): when it can own tasks there, or its mark is
// below the shard's cut (the log grew, and what lies below was placed by
// an older count). Exactly the indexes that read a shard count toward its
// low watermark.
func (e *Epoch) Reads(s, k int) bool {
	if e.CanOwnIn(s, k) {
		return true
	}
	c, ok := e.Cut[s]
	return ok && e.At(s, k).Less(c)
}

// Transitional reports whether index k reads shard s only for what lies
// below its cut: once its mark there has passed the cut, it reads the
// shard no more.
func (e *Epoch) Transitional(s, k int) bool {
	_, ok := e.Cut[s]
	return ok && !e.CanOwnIn(s, k)
}

// Placed checks a task read at position p of shard s, with id id, against
// the epoch's alignment: ok when the log is not aligned there, p is below
// the shard's cut, or id % Aligned == s. When it is not ok, late says the
// id belongs to s by the count before the log grew (Was): a producer that
// still places by it.
func (e *Epoch) Placed(s int, p transport.Position, id uint64) (ok, late bool) {
	if e.Aligned == 0 || s >= e.Aligned || id%uint64(e.Aligned) == uint64(s) {
		return true, false
	}
	if c, cut := e.Cut[s]; cut && p.Less(c) {
		return true, false
	}
	return false, e.Was > 0 && s < e.Was && id%uint64(e.Was) == uint64(s)
}

// Low returns the epoch's low watermark in shard s: the lowest Low of the
// indexes that read it (Reads). Below it every index has finished its
// tasks: a new epoch starts there, a log may drop what lies below it, and
// the group's lag counts from it. The store computes it (Read, ReadLow);
// for an epoch read otherwise it is the lowest Low of the marks read,
// taking those not read at Start.
func (e *Epoch) Low(s int) transport.Position {
	if s < len(e.lows) {
		return e.lows[s]
	}
	var low transport.Position
	first := true
	for k := range e.R {
		if !e.Reads(s, k) {
			continue
		}
		if p := e.At(s, k); first || p.Less(low) {
			low, first = p, false
		}
	}
	return low
}

// State is the ledger as a holder opened or read it.
type State struct {
	Current *Epoch   // the epoch being written; nil when the ledger has none
	History []*Epoch // every epoch still needed, oldest first, Current last
	Created bool     // this Open created Current
	// Lost is true when the ledger was gone though the worker had seen an
	// epoch (OpenRequest.Seen): it was recreated from that epoch's start.
	Lost bool
	// Behind is true when the current epoch is older than the one the
	// worker had seen: the store lost its latest writes.
	Behind bool
	// Misplaced describes the last task found in a shard its id does not
	// belong to (Redis.Realign): "" when none was.
	Misplaced string
	// TakenOver is true when this Open took its index over, in the
	// current epoch, from a holder that had not released it (it crashed,
	// stalled past its lease, or its last write failed): the tasks of the
	// index between its marks and the log's end now may have been done by
	// that holder after its last write, and may be done again.
	TakenOver bool

	ceiling []transport.Position // per shard, at or above every mark of the history
	// load reads marks into their epochs (the store's); nil: every mark
	// was read.
	load   func(context.Context, []markAt) error
	loaded map[markAt]bool
}

// markAt names one mark of one epoch.
type markAt struct {
	e    *Epoch
	s, k int
}

// TaskAt is a task of the log, by place and id, as Prepare takes it.
type TaskAt struct {
	// Shard is the index of the shard the task was read from.
	Shard int
	// Position is where in that shard it lies.
	Position transport.Position
	// ID is the task's id, which places it in the mapping.
	ID uint64
}

// Below reports whether a task at p of shard s lies below the highest mark
// of the history there: only then can Done say it is done, and only then
// does it need Prepare.
func (st *State) Below(s int, p transport.Position) bool {
	return s < len(st.ceiling) && p.Less(st.ceiling[s])
}

// Prepare reads, in one round trip for the lot, the marks of older epochs
// that Done needs for tasks (each below the history's marks: Below) and
// that were not read yet: the mark of the index that owned each task in
// each older epoch. A State from Open answers Done only for tasks that
// were prepared (the opener's own marks excepted); one from Read needs
// no Prepare. After an error nothing is known more than before: call it
// again.
func (st *State) Prepare(ctx context.Context, tasks []TaskAt) error {
	if st.load == nil {
		return nil
	}
	var want []markAt
	for _, t := range tasks {
		if !st.Below(t.Shard, t.Position) {
			continue
		}
		for _, e := range st.History {
			if e == st.Current || t.Shard >= len(e.Start) || e.gone[t.Shard] || !t.Position.Less(e.High[t.Shard]) || t.Position.Less(e.Start[t.Shard]) {
				continue
			}
			m := markAt{e, t.Shard, int(t.ID % uint64(e.R))}
			if !st.loaded[m] {
				st.loaded[m] = true
				want = append(want, m)
			}
		}
	}
	if len(want) == 0 {
		return nil
	}
	if err := st.load(ctx, want); err != nil {
		for _, m := range want {
			delete(st.loaded, m)
		}
		return err
	}
	return nil
}

// index computes the ceiling Done checks first: per shard, the highest
// start and the highest High of every epoch of the history, so its cost is
// that of the epochs' heads, not epochs x shards x replicas.
func (st *State) index() {
	st.ceiling = nil
	if st.Current == nil {
		return
	}
	st.ceiling = make([]transport.Position, len(st.Current.Start))
	raise := func(s int, p transport.Position) {
		if s < len(st.ceiling) && st.ceiling[s].Less(p) {
			st.ceiling[s] = p
		}
	}
	for _, e := range st.History {
		for s, p := range e.Start {
			raise(s, p)
		}
		for s, p := range e.High {
			raise(s, p)
		}
		for sl, m := range e.Marks {
			raise(sl.Shard, m.Low)
			raise(sl.Shard, m.High)
		}
	}
}

// From returns where index k reads each shard.
func (st *State) From(k int) []transport.Position {
	out := make([]transport.Position, len(st.Current.Start))
	for s := range out {
		out[s] = st.Current.At(s, k)
	}
	return out
}

// Done reports whether a task at position p of shard s with id x was
// finished by an epoch of the history: skip it. Past every High of the
// history (the common case once a term has caught up) it is one
// comparison. A State from Open answers for the tasks of the opener's
// index that were prepared (Prepare).
func (st *State) Done(s int, p transport.Position, x uint64) bool {
	if s < len(st.ceiling) && !p.Less(st.ceiling[s]) {
		return false
	}
	for _, e := range st.History {
		if e.Mark(s, int(x%uint64(e.R))).Done(p) {
			return true
		}
	}
	return false
}
