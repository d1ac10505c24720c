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
	// Open opens the ledger for a holder of a lease, atomically, and
	// returns the whole ledger: it creates the next epoch when the
	// holder's replicas differ from the current epoch's (or a shard was
	// rewound), and fences the writes of older holders of the index. It
	// returns ErrStale when a newer mapping owns the ledger.
	Open(ctx context.Context, req OpenRequest) (*State, error)
	// Write records a holder's marks, fenced by epoch (ErrMoved) and by
	// token (ErrFenced). A shard's mark never goes backwards.
	Write(ctx context.Context, w WriteRequest) error
	// Read returns the ledger as it is, without changing it; Current is nil
	// for a group with no ledger.
	Read(ctx context.Context) (*State, error)
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
	// id % len(Origin) == s (transport.Info.Aligned): an epoch Open creates
	// records it (Epoch.Aligned), and a new epoch then starts each shard
	// at the lowest Low of the indexes that can own tasks there only.
	Aligned bool
	// Rewound lists shards whose log went back below the marks (a topic or
	// stream deleted and created again: its positions start over). Open
	// then creates the next epoch, with those shards starting at Origin
	// and every older epoch's marks of them dropped, so that nothing of the
	// new log is skipped; the other holders' writes meet ErrMoved and they
	// open again.
	Rewound []int
}

// Write is WriteRequest.
//
// Deprecated: use WriteRequest (beside OpenRequest; the method is
// Store.Write).
type Write = WriteRequest

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

// Epoch is one mapping's checkpoints.
type Epoch struct {
	N      int64                // epoch number, from 1
	R      int                  // replicas of the mapping
	Token  int64                // token of the lease that created it
	Start  []transport.Position // per shard, where the epoch began
	Marks  map[Slot]Mark        // written marks; others are {Start, Start}
	Tokens map[Slot]int64       // token of each mark's writer
	Opened map[int]int64        // per index, the newest token that opened the epoch
	// Aligned is the shard count the epoch's log is aligned to (0: not
	// aligned): shard s < Aligned holds only tasks whose id has
	// id % Aligned == s, so only the indexes that can own such ids
	// (CanOwnIn) read it and have marks there. A log that grew shards
	// keeps the count it had, and its shards from Aligned on are read by
	// every index.
	Aligned int
	// ResetAt is when Redis.Reset created the epoch (zero: a worker's
	// open did).
	ResetAt time.Time

	grid [][]Mark // [shard][index], built when read from a store
}

// Slot names one index's place in one shard.
type Slot struct {
	Shard int // the shard of the log
	Index int // the lease's index
}

// Mark returns the mark of index k in shard s.
func (e *Epoch) Mark(s, k int) Mark {
	if s < len(e.grid) && k < len(e.grid[s]) {
		return e.grid[s][k]
	}
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

// CanOwnIn reports whether index k of the epoch can own tasks in shard s:
// always, unless the log is aligned (Aligned) and s is below its count.
func (e *Epoch) CanOwnIn(s, k int) bool {
	if e.Aligned == 0 || s >= e.Aligned {
		return true
	}
	return partition.Assignment{Index: k, Replicas: e.R}.CanOwnIn(s, e.Aligned)
}

// Low returns the epoch's low watermark in shard s: the lowest Low of the
// indexes that can own tasks there. Below it every index has finished its
// tasks: a new epoch starts there, a log may drop what lies below it, and
// the group's lag counts from it.
func (e *Epoch) Low(s int) transport.Position {
	var low transport.Position
	first := true
	for k := range e.R {
		if !e.CanOwnIn(s, k) {
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

	ceiling []transport.Position // per shard, at or above every mark of the history
}

// index computes the ceiling Done checks first: per shard, the highest
// start and the highest Low or High of a written mark, in every epoch of
// the history (a mark not written is {Start, Start}), so its cost is that
// of the ledger's fields, not epochs x shards x replicas.
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
// comparison.
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
