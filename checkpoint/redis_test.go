package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"pgregory.net/rapid"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// task is one message of the model log.
type task struct {
	id       uint64
	finished bool
	by       *holder // who finished it last
	era      int     // the ledger's era when it was finished (a loss starts a new one)
}

// holder is one lease holder of index k: where it has read each shard to,
// the tasks it took and has not finished (cut tasks, failing tasks and
// tasks in flight all look like this), and the mark it last wrote.
type holder struct {
	k       int
	token   int64
	st      *State
	cursor  []uint64
	taken   []map[uint64]bool // per shard: positions taken, unfinished
	written []Mark
	prior   []Mark // the index's marks when the holder opened the epoch
	crashed bool
}

// model drives a real ledger with the holders of a group's mappings and
// keeps the truth: which task is finished, by whom.
type model struct {
	t      *rapid.T
	l      *Redis
	c      redis.UniversalClient
	log    [][]*task // per shard
	r      int
	token  int64
	hs     []*holder
	old    []*holder // the holders of the mapping before: paused, they may still write
	era    int
	seen   int64
	start  []transport.Position
	offers int
}

func (m *model) origin() []transport.Position { return make([]transport.Position, len(m.log)) }

// remap opens the ledger for every index of a new mapping.
func (m *model) remap(r int, tokenStep int64) {
	m.r = r
	m.token += tokenStep
	m.old, m.hs = m.hs, nil
	for k := range r {
		req := OpenRequest{Replicas: r, Index: k, Token: m.token, Origin: m.origin(), Seen: m.seen, SeenStart: m.start}
		st, err := m.l.Open(context.Background(), req)
		if err != nil {
			m.t.Fatalf("open %d of %d: %v", k, r, err)
		}
		if st.Current.N > m.seen {
			m.seen, m.start = st.Current.N, slices.Clone(st.Current.Start)
		}
		from := st.From(k)
		h := &holder{k: k, token: m.token, st: st, cursor: make([]uint64, len(m.log)), taken: make([]map[uint64]bool, len(m.log)),
			written: make([]Mark, len(m.log)), prior: make([]Mark, len(m.log))}
		for s := range m.log {
			h.cursor[s] = from[s].Lo
			h.taken[s] = map[uint64]bool{}
			h.written[s] = st.Current.Mark(s, k)
			h.prior[s] = h.written[s]
		}
		m.hs = append(m.hs, h)
	}
}

// progress makes holder h read n messages of shard s, taking those it owns
// and the ledger does not call done.
func (m *model) progress(h *holder, s, n int) {
	for ; n > 0 && h.cursor[s] < uint64(len(m.log[s])); n-- {
		p := h.cursor[s]
		x := m.log[s][p]
		h.cursor[s]++
		if x.id%uint64(m.r) != uint64(h.k) || prepared(h.st).Done(s, transport.Offset(p), x.id) {
			continue
		}
		m.offers++
		if x.finished && x.era == m.era {
			// Offered again: only allowed when the holder that finished
			// it crashed before writing a mark that says so.
			if b := x.by; !b.crashed || b.written[s].Done(transport.Offset(p)) {
				m.t.Fatalf("task %d of shard %d (id %d) offered again to %d of %d; finished by index %d (crashed %v, wrote %+v)",
					p, s, x.id, h.k, m.r, b.k, b.crashed, b.written[s])
			}
		}
		h.taken[s][p] = true
	}
}

// finish finishes one task h has taken, any one: tasks finish out of
// order, and the ones left are cut off or failing.
func (m *model) finish(h *holder, s int, pick int) {
	ps := slices.Sorted(mapKeys(h.taken[s]))
	if len(ps) == 0 {
		return
	}
	p := ps[pick%len(ps)]
	delete(h.taken[s], p)
	x := m.log[s][p]
	x.finished, x.by, x.era = true, h, m.era
}

func mapKeys(m map[uint64]bool) func(func(uint64) bool) {
	return func(yield func(uint64) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// mark is what the consumer's bookkeeping writes for h in shard s: its
// unfinished tasks, kept beyond what it has read by the index's mark when
// it opened the epoch (Mark.KeepBeyond: a later term of the same index in
// the same epoch, which has read less, must not drop what its predecessor
// knew was done).
func (m *model) mark(h *holder, s int) Mark {
	ps := slices.Sorted(mapKeys(h.taken[s]))
	next := transport.Offset(h.cursor[s])
	if len(ps) == 0 {
		return Mark{Low: next, High: next}.KeepBeyond(h.prior[s])
	}
	mk := Mark{Low: transport.Offset(ps[0]), High: next}
	for _, p := range ps[1:] {
		mk.Undone = append(mk.Undone, transport.Offset(p))
	}
	return mk.KeepBeyond(h.prior[s])
}

func (m *model) write(h *holder) error {
	marks := map[int]Mark{}
	for s := range m.log {
		marks[s] = m.mark(h, s)
	}
	err := m.l.Write(context.Background(), WriteRequest{Epoch: h.st.Current.N, Token: h.token, Index: h.k, Marks: marks})
	if err == nil {
		copy(h.written, slices.Collect(func(yield func(Mark) bool) {
			for s := range m.log {
				if !yield(marks[s]) {
					return
				}
			}
		}))
	}
	return err
}

// TestLedgerNeverOffersFinishedWorkAgain runs a model group against a
// real ledger: tasks finished out of order, cut off and failing, clean
// handovers and crashes, mappings of any size, token jumps (a change of
// Interval), late writes of paused former holders and the loss of the
// ledger. After a clean handover no finished task is offered again; after
// a crash, only what the crashed holder had not written; after a loss,
// tasks may be offered again but none is ever skipped.
func TestLedgerNeverOffersFinishedWorkAgain(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(func(*redis.Options) {})
	group := 0
	rapid.Check(t, func(rt *rapid.T) {
		group++
		shards := rapid.IntRange(1, 3).Draw(rt, "shards")
		name := fmt.Sprintf("ledger-%d", group)
		m := &model{t: rt, l: NewRedis(c, name), c: c, log: make([][]*task, shards), token: 100}
		m.remap(rapid.IntRange(1, 4).Draw(rt, "r"), 2)
		rt.Repeat(map[string]func(*rapid.T){
			"append": func(rt *rapid.T) {
				s := rapid.IntRange(0, shards-1).Draw(rt, "shard")
				for range rapid.IntRange(1, 10).Draw(rt, "n") {
					m.log[s] = append(m.log[s], &task{id: rapid.Uint64Range(0, 30).Draw(rt, "id")})
				}
			},
			"progress": func(rt *rapid.T) {
				h := m.hs[rapid.IntRange(0, len(m.hs)-1).Draw(rt, "k")]
				m.progress(h, rapid.IntRange(0, shards-1).Draw(rt, "shard"), rapid.IntRange(1, 8).Draw(rt, "n"))
			},
			"finish": func(rt *rapid.T) {
				h := m.hs[rapid.IntRange(0, len(m.hs)-1).Draw(rt, "k")]
				m.finish(h, rapid.IntRange(0, shards-1).Draw(rt, "shard"), rapid.IntRange(0, 100).Draw(rt, "pick"))
			},
			"checkpoint": func(rt *rapid.T) {
				if err := m.write(m.hs[rapid.IntRange(0, len(m.hs)-1).Draw(rt, "k")]); err != nil {
					rt.Fatalf("write: %v", err)
				}
			},
			"clean handover": func(rt *rapid.T) {
				for _, h := range m.hs {
					if err := m.write(h); err != nil {
						rt.Fatalf("write: %v", err)
					}
				}
				m.remap(rapid.IntRange(1, 4).Draw(rt, "r"), 2)
			},
			"crash and handover": func(rt *rapid.T) {
				crashed := m.hs[rapid.IntRange(0, len(m.hs)-1).Draw(rt, "k")]
				crashed.crashed = true
				for _, h := range m.hs {
					if h != crashed {
						if err := m.write(h); err != nil {
							rt.Fatalf("write: %v", err)
						}
					}
				}
				m.remap(rapid.IntRange(1, 4).Draw(rt, "r"), 2)
			},
			"settings change": func(rt *rapid.T) {
				// Tokens of a group restarted with another Interval: larger
				// by an arbitrary amount.
				for _, h := range m.hs {
					if err := m.write(h); err != nil {
						rt.Fatalf("write: %v", err)
					}
				}
				m.remap(rapid.IntRange(1, 4).Draw(rt, "r"), rapid.Int64Range(2, 1<<40).Draw(rt, "jump"))
			},
			"late write of a paused holder": func(rt *rapid.T) {
				if len(m.old) == 0 {
					rt.Skip("no former holder")
				}
				h := m.old[rapid.IntRange(0, len(m.old)-1).Draw(rt, "k")]
				err := m.write(h)
				if err == nil && h.st.Current.N == m.hs[0].st.Current.N {
					// Same epoch, same index: the newer holder opened it, so
					// the old one's write must be fenced.
					for _, x := range m.hs {
						if x.k == h.k {
							rt.Fatalf("a former holder of index %d (token %d) wrote the epoch its successor (token %d) opened", h.k, h.token, x.token)
						}
					}
				}
				if err != nil && !errors.Is(err, ErrMoved) && !errors.Is(err, ErrFenced) {
					rt.Fatalf("late write: %v", err)
				}
			},
			"ledger lost": func(rt *rapid.T) {
				if err := m.c.Del(context.Background(), Key(name)).Err(); err != nil {
					rt.Fatal(err)
				}
				m.era++
				for _, h := range m.hs {
					h.crashed = true // their marks are gone
				}
				m.remap(rapid.IntRange(1, 4).Draw(rt, "r"), 2)
				if !m.hs[0].st.Lost {
					rt.Fatalf("the ledger was deleted but Open did not report it lost")
				}
			},
			"": func(rt *rapid.T) {
				// Nothing is lost: every task not yet finished is taken by
				// its owner, or ahead of its owner's cursor and not called
				// done.
				for s, sh := range m.log {
					for p, x := range sh {
						if x.finished {
							continue
						}
						h := m.hs[x.id%uint64(m.r)]
						if h.taken[s][uint64(p)] {
							continue
						}
						if h.cursor[s] > uint64(p) || prepared(h.st).Done(s, transport.Offset(uint64(p)), x.id) {
							rt.Fatalf("task %d of shard %d (id %d) will never be offered to its owner, %d of %d", p, s, x.id, h.k, m.r)
						}
					}
				}
			},
		})
	})
}

func TestOpenRefusesAnOlderMappingAndWriteIsFenced(t *testing.T) {
	srv := redistest.Start(t)
	l := NewRedis(srv.Client(func(*redis.Options) {}), "fence")
	ctx := context.Background()
	origin := []transport.Position{{}, {}}
	open := func(r, k int, tok int64) (*State, error) {
		return l.Open(ctx, OpenRequest{Replicas: r, Index: k, Token: tok, Origin: origin})
	}
	st, err := open(3, 0, 10)
	if err != nil || !st.Created || st.Current.N != 1 {
		t.Fatalf("first Open = %+v, %v; want epoch 1 created", st, err)
	}
	if _, err := open(2, 1, 14); err != nil {
		t.Fatal(err)
	}
	if _, err := open(3, 0, 12); !errors.Is(err, ErrStale) {
		t.Fatalf("Open by an older lease of another mapping = %v; want ErrStale", err)
	}
	one := map[int]Mark{0: {Low: transport.Offset(5), High: transport.Offset(5)}}
	if err := l.Write(ctx, WriteRequest{Epoch: 1, Token: 12, Index: 0, Marks: one}); !errors.Is(err, ErrMoved) {
		t.Fatalf("Write to a past epoch = %v; want ErrMoved", err)
	}
	if err := l.Write(ctx, WriteRequest{Epoch: 2, Token: 16, Index: 1, Marks: one}); err != nil {
		t.Fatal(err)
	}
	if err := l.Write(ctx, WriteRequest{Epoch: 2, Token: 15, Index: 1, Marks: one}); !errors.Is(err, ErrFenced) {
		t.Fatalf("Write by an older holder of the index = %v; want ErrFenced", err)
	}
	st, _ = l.Read(ctx)
	if got := st.Current.At(0, 1); got != transport.Offset(5) {
		t.Fatalf("position of index 1 in shard 0 = %v; want 5", got)
	}
}

// A paused former holder's late write, landing after its successor opened
// the epoch but before the successor wrote anything, is refused: the
// checkpoint never goes backwards, nor forward on a stale holder's word.
func TestOpenFencesTheFormerHolder(t *testing.T) {
	srv := redistest.Start(t)
	l := NewRedis(srv.Client(func(*redis.Options) {}), "late")
	ctx := context.Background()
	origin := []transport.Position{{}}
	if _, err := l.Open(ctx, OpenRequest{Replicas: 1, Token: 10, Origin: origin}); err != nil {
		t.Fatal(err)
	}
	at := func(n uint64) map[int]Mark {
		return map[int]Mark{0: {Low: transport.Offset(n), High: transport.Offset(n)}}
	}
	if err := l.Write(ctx, WriteRequest{Epoch: 1, Token: 10, Marks: at(5)}); err != nil {
		t.Fatal(err)
	}
	// The successor (same mapping) opens; the old holder wakes and writes.
	if _, err := l.Open(ctx, OpenRequest{Replicas: 1, Token: 20, Origin: origin}); err != nil {
		t.Fatal(err)
	}
	if err := l.Write(ctx, WriteRequest{Epoch: 1, Token: 10, Marks: at(9)}); !errors.Is(err, ErrFenced) {
		t.Fatalf("late write after the successor opened = %v; want ErrFenced", err)
	}
	// The successor's own writes never go backwards.
	if err := l.Write(ctx, WriteRequest{Epoch: 1, Token: 20, Marks: at(7)}); err != nil {
		t.Fatal(err)
	}
	if err := l.Write(ctx, WriteRequest{Epoch: 1, Token: 20, Marks: at(6)}); err != nil {
		t.Fatal(err)
	}
	st, _ := l.Read(ctx)
	if got := st.Current.At(0, 0); got != transport.Offset(7) {
		t.Fatalf("checkpoint after a lower write = %v; want 7 (never backwards)", got)
	}
}

// A mark records the work finished above the watermark, and the skip rule
// reads it back exactly.
func TestMarkRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	l := NewRedis(srv.Client(func(*redis.Options) {}), "marks")
	ctx := context.Background()
	if _, err := l.Open(ctx, OpenRequest{Replicas: 2, Token: 10, Origin: []transport.Position{{}}}); err != nil {
		t.Fatal(err)
	}
	mk := Mark{Low: transport.Offset(3), High: transport.Offset(10), Undone: []transport.Position{transport.Offset(5), transport.Offset(8)}}
	if err := l.Write(ctx, WriteRequest{Epoch: 1, Token: 10, Index: 1, Marks: map[int]Mark{0: mk}}); err != nil {
		t.Fatal(err)
	}
	st, err := l.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := st.Current.Mark(0, 1)
	if !slices.Equal(got.Undone, mk.Undone) || got.Low != mk.Low || got.High != mk.High {
		t.Fatalf("mark read back %+v; want %+v", got, mk)
	}
	var done []uint64
	for p := range uint64(12) {
		if prepared(st).Done(0, transport.Offset(p), 1) { // id 1: index 1 of 2
			done = append(done, p)
		}
	}
	if want := []uint64{0, 1, 2, 4, 6, 7, 9}; !slices.Equal(done, want) {
		t.Errorf("done positions %v; want %v", done, want)
	}
}

// The ledger vanishing between the steps of opening a term cannot happen:
// Open is one script. A ledger deleted just before Open is recreated (and
// reported lost to a worker that had seen it), never a panic.
func TestOpenAfterTheLedgerVanished(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(func(*redis.Options) {})
	l := NewRedis(c, "vanish")
	ctx := context.Background()
	st, err := l.Open(ctx, OpenRequest{Replicas: 1, Token: 10, Origin: []transport.Position{{}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Write(ctx, WriteRequest{Epoch: 1, Token: 10, Marks: map[int]Mark{0: {Low: transport.Offset(40), High: transport.Offset(40)}}}); err != nil {
		t.Fatal(err)
	}
	c.Del(ctx, Key("vanish"))
	st, err = l.Open(ctx, OpenRequest{Replicas: 1, Token: 11, Origin: []transport.Position{transport.Offset(100)}, Seen: st.Current.N, SeenStart: []transport.Position{transport.Offset(30)}})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Lost || st.Current.N != 2 || st.From(0)[0] != transport.Offset(30) {
		t.Fatalf("Open after the loss: lost %v, epoch %d, from %v; want lost, epoch 2, from 30 (the seen start, not the origin 100)", st.Lost, st.Current.N, st.From(0))
	}
}

// A shard whose log was recreated starts over: the next epoch reads it
// from the origin and no epoch's marks of the old log skip anything of it.
func TestRewoundShardStartsOver(t *testing.T) {
	srv := redistest.Start(t)
	l := NewRedis(srv.Client(func(*redis.Options) {}), "rewound")
	ctx := context.Background()
	origin := []transport.Position{{}, {}}
	if _, err := l.Open(ctx, OpenRequest{Replicas: 2, Index: 0, Token: 10, Origin: origin}); err != nil {
		t.Fatal(err)
	}
	at := func(n uint64) Mark { return Mark{Low: transport.Offset(n), High: transport.Offset(n)} }
	for k := range 2 {
		if err := l.Write(ctx, WriteRequest{Epoch: 1, Token: 10, Index: k, Marks: map[int]Mark{0: at(500), 1: at(70)}}); err != nil {
			t.Fatal(err)
		}
	}
	// A new mapping first (history keeps epoch 1), then shard 0 found rewound.
	if _, err := l.Open(ctx, OpenRequest{Replicas: 3, Index: 0, Token: 20, Origin: origin}); err != nil {
		t.Fatal(err)
	}
	st, err := l.Open(ctx, OpenRequest{Replicas: 3, Index: 1, Token: 20, Origin: origin, Rewound: []int{0}})
	if err != nil {
		t.Fatal(err)
	}
	if st.Current.N != 3 || st.From(1)[0] != (transport.Position{}) || st.From(1)[1] != transport.Offset(70) {
		t.Fatalf("after the rewind: epoch %d, from %v; want epoch 3, shard 0 from 0 and shard 1 from 70", st.Current.N, st.From(1))
	}
	for p := range uint64(600) {
		for x := range uint64(6) {
			if prepared(st).Done(0, transport.Offset(p), x) {
				t.Fatalf("position %d of the rewound shard (id %d) is called done", p, x)
			}
		}
	}
	if !prepared(st).Done(1, transport.Offset(69), 0) {
		t.Errorf("shard 1 forgot its marks")
	}
	if err := l.Write(ctx, WriteRequest{Epoch: 2, Token: 20, Index: 0, Marks: map[int]Mark{0: at(600)}}); !errors.Is(err, ErrMoved) {
		t.Errorf("a holder of the epoch before the rewind wrote %v; want ErrMoved", err)
	}
}

// deleteBefore is a go-redis hook that deletes the ledger just before each
// script runs: the worst moment of opening a term.
type deleteBefore struct {
	other *redis.Client
	key   string
}

func (h deleteBefore) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h deleteBefore) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h deleteBefore) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.other.Del(ctx, h.key)
		}
		return next(ctx, cmd)
	}
}

// A ledger deleted in the middle of opening a term (between any two
// commands a worker sends) gives an error or a fresh epoch, never a panic:
// the open is one script that returns the whole ledger.
func TestLedgerDeletedWhileOpening(t *testing.T) {
	srv := redistest.Start(t)
	other := srv.Client(func(*redis.Options) {})
	hooked := srv.Client(func(*redis.Options) {})
	l := NewRedis(hooked, "deleted")
	ctx := context.Background()
	origin := []transport.Position{transport.Offset(3)}
	st, err := l.Open(ctx, OpenRequest{Replicas: 1, Token: 10, Origin: origin})
	if err != nil {
		t.Fatal(err)
	}
	hooked.AddHook(deleteBefore{other: other, key: Key("deleted")})
	for i := range 20 {
		st, err = l.Open(ctx, OpenRequest{Replicas: 1 + i%3, Token: int64(20 + i), Origin: origin, Seen: st.Current.N, SeenStart: st.Current.Start})
		if err != nil {
			t.Fatalf("open %d with the ledger deleted first: %v", i, err)
		}
		if !st.Lost || !st.Created || st.From(0)[0] != transport.Offset(3) {
			t.Fatalf("open %d: lost %v, created %v, from %v; want a fresh epoch reported lost, from the seen start", i, st.Lost, st.Created, st.From(0))
		}
		if _, err := l.Read(ctx); err != nil {
			t.Fatalf("read with the ledger deleted first: %v", err)
		}
	}
}

// The size of a checkpoint: what one index's mark of one shard costs in
// the ledger, by how many unfinished tasks it lists above its watermark,
// for Redis stream entries a few milliseconds apart and for offsets, read
// back exactly. Logged for docs; asserted to stay within 8 bytes per
// listed position past the first (the encoding is deterministic).
func TestMarkSize(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(func(*redis.Options) {})
	ctx := context.Background()
	const ms = 1_800_000_000_000
	kinds := []struct {
		name string
		low  transport.Position
		at   func(i int) transport.Position
	}{
		{"stream entries", transport.Position{Hi: ms}, func(i int) transport.Position { return transport.Position{Hi: ms + 1 + uint64(3*i), Lo: uint64(i % 2)} }},
		{"offsets", transport.Offset(999_999), func(i int) transport.Position { return transport.Offset(1_000_000 + uint64(5*i)) }},
	}
	for _, kind := range kinds {
		var base int64
		for _, n := range []int{0, 1, 16, 128, 1024} {
			name := fmt.Sprintf("size-%s-%d", kind.name, n)
			l := NewRedis(c, name)
			if _, err := l.Open(ctx, OpenRequest{Replicas: 1, Token: ms, Origin: []transport.Position{{}}}); err != nil {
				t.Fatal(err)
			}
			mk := Mark{Low: kind.low, High: kind.at(n)}
			for i := range n {
				mk.Undone = append(mk.Undone, kind.at(i))
			}
			if err := l.Write(ctx, WriteRequest{Epoch: 1, Token: ms, Marks: map[int]Mark{0: mk}}); err != nil {
				t.Fatal(err)
			}
			st, err := l.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Current.Mark(0, 0); !slices.Equal(got.Undone, mk.Undone) || got.High != mk.High {
				t.Errorf("%s: a mark listing %d read back as %d positions up to %v; want them all, up to %v", kind.name, n, len(got.Undone), got.High, mk.High)
			}
			var fields int64
			for _, f := range []string{"1:pos:0:0", "1:top:0:0", "1:und:0:0", "1:ptok:0:0"} {
				fields += c.HStrLen(ctx, Key(name), f).Val() + int64(len(f))
			}
			switch {
			case n == 0:
				base = fields
			case n > 1:
				if per := float64(fields-base-41) / float64(n-1); per > 8 {
					t.Errorf("%s: %.1f bytes per listed position; want at most 8", kind.name, per)
				}
			}
			t.Logf("figures: a mark listing %d unfinished %s above its watermark: %d bytes of fields and values (MEMORY USAGE of the ledger: %d)",
				n, kind.name, fields, c.MemoryUsage(ctx, Key(name), 0).Val())
		}
	}
}

// Found by the ledger's model (checkpoint/model, BUG_ANYR): a ledger lost
// and created again by a worker that had seen none of it starts again at
// epoch 1, under another mapping. A former holder of epoch 1 of the old
// mapping, paused past its lease, then writes late: the epoch's number
// matches, no newer holder of its index has opened the new epoch yet, and
// its mark, which says what index 1 of 2 did, would be read as what index
// 1 of 3 did, skipping a task nobody did. The write names its replicas,
// and an epoch of another mapping refuses it as moved.
func TestLateWriteIntoAnEpochOfAnotherMappingIsMoved(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(func(*redis.Options) {})
	l := NewRedis(c, "renumbered")
	ctx := context.Background()
	origin := []transport.Position{{}}
	if _, err := l.Open(ctx, OpenRequest{Replicas: 2, Index: 1, Token: 10, Origin: origin}); err != nil {
		t.Fatal(err)
	}
	c.Del(ctx, Key("renumbered")) // lost: evicted, flushed, a failover
	st, err := l.Open(ctx, OpenRequest{Replicas: 3, Index: 0, Token: 20, Origin: origin})
	if err != nil {
		t.Fatal(err)
	}
	if st.Current.N != 1 || st.Current.R != 3 {
		t.Fatalf("the ledger created again: epoch %d of %d replicas, want epoch 1 of 3", st.Current.N, st.Current.R)
	}
	// index 1 of 2 did ids 1 and 3, read to position 5
	late := WriteRequest{Epoch: 1, Token: 10, Index: 1, Replicas: 2,
		Marks: map[int]Mark{0: {Low: transport.Offset(5), High: transport.Offset(5)}}}
	if err := l.Write(ctx, late); !errors.Is(err, ErrMoved) {
		t.Fatalf("a late write of epoch 1 of 2 replicas into epoch 1 of 3: %v, want ErrMoved", err)
	} else {
		t.Log(err)
	}
	st, err = l.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if prepared(st).Done(0, transport.Offset(4), 4) {
		t.Fatal("task 4 (index 1 of 3) is marked done, though nobody did it")
	}
}

// A new epoch starts at the lowest Low of the current one's indexes, on
// a real redis-server and on miniredis alike. On miniredis (gopher-lua,
// which assigns `a, b = b, a % b` left to right) open.lua's gcd answered
// gcd(1, 2) = 2, counted only index 0 of 2 as able to own tasks in an
// aligned single stream, and started the next epoch at index 0's Low:
// index 1's unfinished tasks below it were never read again (the
// mail-sender demo lost up to 32 of 400 mails under load).
func TestNewEpochStartsAtTheLowestLowOnRedisAndMiniredis(t *testing.T) {
	mr := miniredis.RunT(t)
	for name, c := range map[string]*redis.Client{
		"redis-server": redistest.Start(t).Client(func(*redis.Options) {}),
		"miniredis":    redis.NewClient(&redis.Options{Addr: mr.Addr()}),
	} {
		t.Run(name, func(t *testing.T) {
			l := NewRedis(c, "lowest")
			ctx := context.Background()
			origin := []transport.Position{{}}
			for k := range 2 {
				if _, err := l.Open(ctx, OpenRequest{Replicas: 2, Index: k, Token: 10, Origin: origin, Aligned: true}); err != nil {
					t.Fatal(err)
				}
			}
			for k, low := range []uint64{729, 650} {
				m := Mark{Low: transport.Offset(low), High: transport.Offset(820), Undone: []transport.Position{transport.Offset(low + 2)}}
				if err := l.Write(ctx, WriteRequest{Epoch: 1, Token: 10, Index: k, Replicas: 2, Marks: map[int]Mark{0: m}}); err != nil {
					t.Fatal(err)
				}
			}
			st, err := l.Open(ctx, OpenRequest{Replicas: 3, Index: 0, Token: 20, Origin: origin, Aligned: true})
			if err != nil {
				t.Fatal(err)
			}
			if st.Current.N != 2 || st.Current.Start[0] != transport.Offset(650) {
				t.Fatalf("the new epoch %d starts at %v; want epoch 2 at 650, index 1's Low (the lowest)", st.Current.N, st.Current.Start[0])
			}
		})
	}
}

// prepared reads the marks Done needs (Prepare) for whatever it is asked
// next: a test's Done of one task at a time.
func prepared(st *State) preparedState { return preparedState{st} }

type preparedState struct{ st *State }

func (p preparedState) Done(s int, at transport.Position, x uint64) bool {
	if err := p.st.Prepare(context.Background(), []TaskAt{{Shard: s, Position: at, ID: x}}); err != nil {
		panic(err)
	}
	return p.st.Done(s, at, x)
}

// Replicas x shards past MaxSlots is refused before anything is written,
// by Open in Go and by its script (whose epoch would keep the ledger's
// shards when a source says fewer), naming the limit; the ledger stays
// readable. Before, 1,025 replicas over 1,024 shards (each within its own
// bound) was written, and every later script answered ErrCorrupt until
// the ledger was deleted by hand.
func TestOpenPastMaxSlotsIsRefusedAndTheLedgerStaysReadable(t *testing.T) {
	srv := redistest.Start(t)
	l := NewRedis(srv.Client(), "slots")
	ctx := context.Background()
	origin := func(n int) []transport.Position { return make([]transport.Position, n) }
	if _, err := l.Open(ctx, OpenRequest{Replicas: 1000, Token: 1, Origin: origin(MaxShards)}); err != nil {
		t.Fatalf("1,000 replicas over %d shards: %v", MaxShards, err)
	}
	for _, tc := range []struct {
		what   string
		shards int
	}{
		{"1,025 replicas over 1,024 shards (Go's check)", MaxShards},
		{"1,025 replicas over 1 shard while the ledger keeps 1,024 (the script's check)", 1},
	} {
		_, err := l.Open(ctx, OpenRequest{Replicas: 1025, Token: 2, Origin: origin(tc.shards)})
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), strconv.Itoa(MaxSlots)) {
			t.Errorf("%s: Open = %v; want ErrTooLarge naming %d", tc.what, err, MaxSlots)
		}
	}
	st, err := l.Open(ctx, OpenRequest{Replicas: 1000, Index: 999, Token: 1, Origin: origin(MaxShards)})
	if err != nil || st.Current.N != 1 || st.Current.R != 1000 {
		t.Fatalf("the ledger after the refusals: %v, %v; want epoch 1 of 1,000 replicas, readable", st, err)
	}
}

// A holder that takes its index over from one that never released it
// (crashed, stalled past its lease, its last write failed) is told so,
// in the same epoch (State.TakenOver) and in a new one made from a fenced
// epoch some index of which was never released (Epoch.Unreleased): the
// tasks such holders finished after their last marks may be done again,
// and the consumer announces them. A clean release tells nothing.
func TestOpenSaysWhatWasNotReleased(t *testing.T) {
	srv := redistest.Start(t)
	l := NewRedis(srv.Client(), "unreleased")
	ctx := context.Background()
	one := []transport.Position{{}}
	open := func(r, k int, tok int64) *State {
		t.Helper()
		st, err := l.Open(ctx, OpenRequest{Replicas: r, Index: k, Token: tok, Origin: one, Ends: []transport.Position{transport.Offset(500)}})
		if err != nil {
			t.Fatalf("Open(%d replicas, index %d, token %d): %v", r, k, tok, err)
		}
		return st
	}
	release := func(st *State, r, k int, tok int64) {
		t.Helper()
		if err := l.Write(ctx, WriteRequest{Epoch: st.Current.N, Token: tok, Index: k, Replicas: r, Release: true,
			Marks: map[int]Mark{0: {Low: transport.Offset(10), High: transport.Offset(30)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if st := open(1, 0, 1); st.TakenOver {
		t.Error("the first opener: TakenOver; want not")
	}
	if st := open(1, 0, 2); !st.TakenOver {
		t.Error("index 0 taken from token 1, which never released it: not TakenOver")
	} else {
		release(st, 1, 0, 2)
	}
	if st := open(1, 0, 3); st.TakenOver {
		t.Error("index 0 taken from token 2, which released it: TakenOver")
	}
	// Epoch 2 (2 replicas) is made while epoch 1's index 0 (token 3) was
	// never released; index 0 releases epoch 2, index 1 does not.
	st0, st1 := open(2, 0, 4), open(2, 1, 4)
	if u := st0.Current.Unreleased; !st0.Current.Fenced || u == nil || u.Replicas != 1 || !slices.Equal(u.Indexes, []int{0}) || st1.Current.Unreleased == nil {
		t.Fatalf("epoch 2: fenced %v, unreleased %+v; want fenced, and epoch 1's index 0 unreleased", st0.Current.Fenced, u)
	}
	release(st0, 2, 0, 4)
	st := open(3, 2, 5)
	u := st.Current.Unreleased
	if u == nil || u.Replicas != 2 || !slices.Equal(u.Indexes, []int{1}) || u.Ends[0] != transport.Offset(500) {
		t.Fatalf("epoch 3 made while epoch 2's index 1 was held: Unreleased %+v; want 2 replicas, [1], ends [500]", u)
	}
	if !u.MayRedo(0, transport.Offset(499), 1) || u.MayRedo(0, transport.Offset(500), 1) || u.MayRedo(0, transport.Offset(10), 2) {
		t.Error("MayRedo: want true for index 1's task below the end, false at the end or for index 0's")
	}
	st3 := open(3, 0, 5)
	if st3.Current.Unreleased == nil {
		t.Error("another opener of epoch 3 does not see what was not released")
	}
	// Epoch 3 released by all its openers: epoch 4, made from it, carries
	// what epoch 2 left unreleased while epoch 2 is in the history (a task
	// of its index 1 no one took in epoch 3 may still be taken again).
	release(st, 3, 2, 5)
	release(st3, 3, 0, 5)
	st4 := open(2, 0, 6)
	if u := st4.Current.Unreleased; u == nil || u.Replicas != 2 || !slices.Equal(u.Indexes, []int{1}) {
		t.Fatalf("epoch 4 made from a released epoch 3 while epoch 2 is in the history: Unreleased %+v; want epoch 2's: 2 replicas, [1]", u)
	}
}

// A realign waits, writing nothing, until every index of the current
// epoch has opened it: a holder is never left two epochs behind, where a
// later realign could drop its epoch from the history before it writes
// (checkpoint/model/grow.pml, BUG_EAGER).
func TestRealignWaitsForEveryIndexToOpen(t *testing.T) {
	srv := redistest.Start(t)
	l := NewRedis(srv.Client(), "realign-wait")
	ctx := context.Background()
	origin := make([]transport.Position, 2)
	st, err := l.Open(ctx, OpenRequest{Replicas: 2, Index: 0, Token: 1, Origin: origin, Aligned: true})
	if err != nil {
		t.Fatal(err)
	}
	req := RealignRequest{Epoch: st.Current.N, Replicas: 2, Token: 1, Shard: 0, Key: "1", Ends: []transport.Position{transport.Offset(5), transport.Offset(5)}}
	if err := l.Realign(ctx, req); !errors.Is(err, ErrWait) {
		t.Fatalf("Realign with index 1 not opened = %v; want ErrWait", err)
	}
	if now, _ := l.ReadLow(ctx); now.Current.N != st.Current.N {
		t.Fatalf("the epoch is %d after a realign that waited; want %d, nothing written", now.Current.N, st.Current.N)
	}
	if _, err := l.Open(ctx, OpenRequest{Replicas: 2, Index: 1, Token: 1, Origin: origin, Aligned: true}); err != nil {
		t.Fatal(err)
	}
	if err := l.Realign(ctx, req); err != nil {
		t.Fatalf("Realign once every index opened = %v", err)
	}
	if now, _ := l.ReadLow(ctx); now.Current.N != st.Current.N+1 {
		t.Fatalf("the epoch is %d after the realign; want %d", now.Current.N, st.Current.N+1)
	}
}

// An epoch made before the ledger counted its openers (n:opened) is
// realigned once every index has opened it, counted from their stamps.
func TestRealignOfAnEpochWithoutItsOpenersCount(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	l := NewRedis(c, "realign-legacy")
	ctx := context.Background()
	origin := make([]transport.Position, 2)
	var st *State
	for k := range 2 {
		var err error
		if st, err = l.Open(ctx, OpenRequest{Replicas: 2, Index: k, Token: 1, Origin: origin, Aligned: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.HDel(ctx, Key("realign-legacy"), fmt.Sprintf("%d:opened", st.Current.N)).Err(); err != nil {
		t.Fatal(err)
	}
	req := RealignRequest{Epoch: st.Current.N, Replicas: 2, Token: 1, Key: "1", Ends: []transport.Position{transport.Offset(5), transport.Offset(5)}}
	if err := l.Realign(ctx, req); err != nil {
		t.Fatalf("Realign of an epoch both indexes opened, its count absent = %v; want it made", err)
	}
}
