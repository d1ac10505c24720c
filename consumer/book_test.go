package consumer

import (
	"slices"
	"testing"
	"time"

	"github.com/nandi-go/nandi/transport"
	"pgregory.net/rapid"
)

// bookModel drives a book with random operations, as the runner does
// (take within room, run what next returns, settle it, make the parked
// ready as time passes, read light tasks again), and checks its rules
// after every step against what it was told.
type bookModel struct {
	b          *book
	capacity   int
	maxWaiting int
	now        time.Time
	pos        []uint64 // per shard, the next position
	order      map[uint64][]*task
	running    map[*task]bool
	parkedAt   map[uint64]time.Time
	done       map[*task]int
	leftOnes   map[*task]bool   // cut off by the term's end (leave)
	dead       map[uint64]*task // the task of each id sent to DeadLetter, not run since
	front      []*task          // the tasks that met a shut window, the last first in line
	shut       bool             // the start window is shut: since a resNotNow, until openWindow
	ran        []*task          // every task next returned, in order
	all        []*task
}

func newBookModel(t *rapid.T) *bookModel {
	m := &bookModel{
		capacity:   rapid.IntRange(1, 8).Draw(t, "capacity"),
		maxWaiting: rapid.IntRange(0, 6).Draw(t, "maxWaiting"),
		now:        time.Unix(1_000_000, 0),
		pos:        make([]uint64, 2),
		order:      map[uint64][]*task{},
		running:    map[*task]bool{},
		parkedAt:   map[uint64]time.Time{},
		done:       map[*task]int{},
		leftOnes:   map[*task]bool{},
		dead:       map[uint64]*task{},
	}
	m.b = newBook(m.capacity, m.maxWaiting, rapid.Bool().Draw(t, "reread"))
	m.b.open([]*shardTrack{{}, {}}, true)
	return m
}

// take reads a batch of up to the room there is, each message of a few
// ids over two shards, and a message of another index between them.
func (m *bookModel) take(t *rapid.T) {
	k := rapid.IntRange(0, m.b.room()).Draw(t, "k")
	var ms []*transport.Message
	var ts []*task
	var spare []*task // finished tasks the book gives again (as intake asks for them)
	if rapid.Bool().Draw(t, "spares") {
		spare = m.b.spares(nil, k)
	}
	for _, sp := range spare {
		m.reuse(t, sp)
	}
	for i := range k {
		s := rapid.IntRange(0, 1).Draw(t, "shard")
		if rapid.Bool().Draw(t, "other index between") {
			ms = append(ms, &transport.Message{Shard: s, Position: transport.Offset(m.pos[s])})
			m.pos[s]++
		}
		msg := &transport.Message{Shard: s, Position: transport.Offset(m.pos[s]), Key: "k"}
		m.pos[s]++
		ms = append(ms, msg)
		tk := &task{}
		if i < len(spare) {
			tk = spare[i]
		}
		*tk = task{m: msg, id: uint64(rapid.IntRange(0, 4).Draw(t, "id")), shard: s, pos: msg.Position}
		ts = append(ts, tk)
		m.order[tk.id] = append(m.order[tk.id], tk)
		m.all = append(m.all, tk)
	}
	m.b.take(ts, ms)
}

// reuse checks that a task the book gives again (spares) finished and is
// nowhere in the book any more, then forgets it: it is taken as a new one.
func (m *bookModel) reuse(t *rapid.T, sp *task) {
	if *sp != (task{}) {
		t.Fatalf("a spare task is not cleared: %+v", *sp)
	}
	if m.done[sp] != 1 || m.running[sp] || m.leftOnes[sp] {
		t.Fatalf("a spare task is not one that finished (finished %d times, running %v, left %v)", m.done[sp], m.running[sp], m.leftOnes[sp])
	}
	for _, q := range m.b.byID.All() {
		if slices.Contains(q.buf[q.head:], sp) {
			t.Fatalf("a spare task is still queued behind id %d", q.id)
		}
	}
	for s, sh := range m.b.shards {
		for u := sh.head; u != nil; u = u.after {
			if u == sp {
				t.Fatalf("a spare task is still in shard %d's unfinished list", s)
			}
		}
	}
	delete(m.done, sp)
	m.all = slices.DeleteFunc(m.all, func(u *task) bool { return u == sp })
	for id, o := range m.order {
		m.order[id] = slices.DeleteFunc(o, func(u *task) bool { return u == sp })
	}
}

// start runs what next returns, reading it again first if it is light.
func (m *bookModel) start(t *rapid.T) {
	tk := m.b.next()
	if tk == nil {
		for id, q := range m.b.byID.All() {
			if m.b.ready.len() == 0 && !m.running[q.first()] && q.slot < 0 && !m.leftOnes[q.first()] {
				t.Fatalf("id %d has a first task neither running, parked nor left, and nothing is ready", id)
			}
		}
		return
	}
	if m.done[tk] > 0 {
		t.Fatalf("next returned a task already finished (id %d, %v)", tk.id, tk.pos)
	}
	for u := range m.running {
		if u.id == tk.id {
			t.Fatalf("two tasks of id %d at once", tk.id)
		}
	}
	for _, u := range m.order[tk.id] {
		if u == tk {
			break
		}
		if m.done[u] == 0 {
			t.Fatalf("id %d: the task at %v ran before the one at %v (per-id order)", tk.id, tk.pos, u.pos)
		}
	}
	if at, ok := m.parkedAt[tk.id]; ok && m.now.Before(at) {
		t.Fatalf("id %d ran before its retry time", tk.id)
	}
	delete(m.parkedAt, tk.id)
	if m.shut {
		t.Fatalf("next gave id %d's task while the start window is shut", tk.id)
	}
	if n := len(m.front); n > 0 {
		if tk != m.front[n-1] {
			t.Fatalf("next gave id %d's task at %v; want id %d's at %v, which met the shut window last", tk.id, tk.pos, m.front[n-1].id, m.front[n-1].pos)
		}
		m.front = m.front[:n-1]
	}
	if d, ok := m.dead[tk.id]; ok && (d != tk || tk.f == nil || !tk.f.dead) {
		t.Fatalf("id %d: the task sent to DeadLetter at %v is not what runs next (%v)", tk.id, d.pos, tk.pos)
	}
	delete(m.dead, tk.id)
	if tk.m == nil {
		run := m.b.lightRun(tk, refillBatch)
		ms := make([]*transport.Message, len(run))
		for i, u := range run {
			ms[i] = &transport.Message{Shard: u.shard, Position: u.pos, Key: "k"}
		}
		m.b.refilled(run, ms)
	}
	m.running[tk] = true
	m.ran = append(m.ran, tk)
}

// settle ends a running task: finished, again (parked for a while), to
// DeadLetter next (ready again at once) or leave (the term is over for it).
func (m *bookModel) settle(t *rapid.T) {
	if len(m.running) == 0 {
		return
	}
	var run []*task
	for u := range m.running {
		run = append(run, u)
	}
	slices.SortFunc(run, func(a, b *task) int { return int(a.id) - int(b.id) })
	tk := rapid.SampledFrom(run).Draw(t, "task")
	delete(m.running, tk)
	switch rapid.IntRange(0, 7).Draw(t, "result") {
	case 0, 1, 2:
		m.b.settle(tk, resHandled, time.Time{})
		m.done[tk]++
	case 3, 4:
		at := m.now.Add(time.Duration(rapid.IntRange(0, 50).Draw(t, "backoff_ms")) * time.Millisecond)
		m.parkedAt[tk.id] = at
		m.b.settle(tk, resRetry, at)
	case 6:
		m.front, m.shut = append(m.front, tk), true
		m.b.settle(tk, resNotNow, time.Time{})
	case 5:
		m.dead[tk.id] = tk
		m.b.settle(tk, resDeadLetter, time.Time{})
		if tk.f == nil || !tk.f.dead {
			t.Fatalf("id %d: settled for DeadLetter, the task is not marked for it", tk.id)
		}
	default:
		m.leftOnes[tk] = true
		m.b.settle(tk, resLeave, time.Time{})
	}
}

func (m *bookModel) tick(t *rapid.T) {
	m.now = m.now.Add(time.Duration(rapid.IntRange(0, 30).Draw(t, "tick_ms")) * time.Millisecond)
	m.b.due(m.now)
}

// check asserts the book's rules after a step.
func (m *bookModel) check(t *rapid.T) {
	whole, light := 0, 0
	for _, tk := range m.all {
		if m.done[tk] > 1 {
			t.Fatalf("a task finished %d times", m.done[tk])
		}
		if m.done[tk] == 1 {
			continue
		}
		if tk.m == nil {
			light++
		} else {
			whole++
		}
	}
	// Whole tasks beyond capacity come only from a light first task read
	// again to run (lightRun: at least itself), one per id at most.
	if m.b.held != whole || whole > m.capacity+m.b.byID.Len() {
		t.Fatalf("held %d, tasks held whole %d, capacity %d", m.b.held, whole, m.capacity)
	}
	if light > m.maxWaiting || m.b.waiting != light {
		t.Fatalf("light tasks %d, book says %d, MaxWaiting %d", light, m.b.waiting, m.maxWaiting)
	}
	// Each shard's mark: every unfinished task at Low or in Undone, no
	// finished one there, High past everything read.
	for s, sh := range m.b.shards {
		mk := sh.mark()
		if mk.High != transport.Offset(m.pos[s]) {
			t.Fatalf("shard %d: High %v, read up to %d", s, mk.High, m.pos[s])
		}
		listed := map[transport.Position]bool{}
		for _, p := range mk.Undone {
			listed[p] = true
		}
		if sh.head != nil {
			listed[mk.Low] = true
		}
		for _, tk := range m.all {
			if tk.shard != s {
				continue
			}
			if unfinished := m.done[tk] == 0; unfinished != listed[tk.pos] {
				t.Fatalf("shard %d: the task at %v is unfinished %v, listed in the mark %v (%+v)", s, tk.pos, unfinished, listed[tk.pos], mk)
			}
			if m.done[tk] == 0 && tk.pos.Less(mk.Low) {
				t.Fatalf("shard %d: unfinished task at %v below Low %v", s, tk.pos, mk.Low)
			}
		}
	}
}

// The book's rules, under any interleaving of takes, starts, outcomes and
// time: per-id order, one task of an id at a time, nothing done twice, no
// retry before its time, MaxPending and MaxWaiting held to, a failing id
// never keeping another id's task from being ready, marks that list every
// unfinished task; and at the end, run out with every task succeeding
// (after a handover for the ones left), every task done exactly once.
func TestBookRules(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := newBookModel(t)
		steps := rapid.IntRange(1, 200).Draw(t, "steps")
		for range steps {
			switch rapid.IntRange(0, 4).Draw(t, "op") {
			case 4:
				m.b.openWindow()
				m.shut = false
			case 0:
				m.take(t)
			case 1:
				m.start(t)
			case 2:
				m.settle(t)
			case 3:
				m.tick(t)
			}
			m.check(t)
		}
		// The term ends: what is running is left, the rest handed back.
		for tk := range m.running {
			m.b.settle(tk, resLeave, time.Time{})
		}
		back := m.b.handBack()
		var want []*task
		for _, tk := range m.all {
			if m.done[tk] == 0 {
				want = append(want, tk)
			}
		}
		if len(back) != len(want) {
			t.Fatalf("handed back %d tasks; %d were unfinished", len(back), len(want))
		}
		for _, tk := range back {
			if m.done[tk] != 0 {
				t.Fatalf("handed back a finished task")
			}
		}
		// The next holder takes them again, in position order per shard,
		// and every one succeeds: each id's tasks in the order first taken.
		next := newBook(len(want)+1, 0, false)
		next.open([]*shardTrack{{}, {}}, true)
		slices.SortFunc(want, func(a, b *task) int {
			if a.shard != b.shard {
				return a.shard - b.shard
			}
			if a.pos.Less(b.pos) {
				return -1
			}
			return 1
		})
		again := make([]*task, len(want))
		for i, tk := range want {
			again[i] = &task{m: &transport.Message{Shard: tk.shard, Position: tk.pos}, id: tk.id, shard: tk.shard, pos: tk.pos}
		}
		next.take(again, nil)
		for tk := next.next(); tk != nil; tk = next.next() {
			next.settle(tk, resHandled, time.Time{})
		}
		if next.byID.Len() != 0 || next.pending() != 0 || next.held != 0 {
			t.Fatalf("after the handover: %d ids, %d pending, %d held", next.byID.Len(), next.pending(), next.held)
		}
	})
}
