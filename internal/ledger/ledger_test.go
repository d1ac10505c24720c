package ledger

import (
	"context"
	"errors"
	"fmt"
	"testing"

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
}

// holder is one lease holder of index k: its cursor per shard and the
// position it last wrote.
type holder struct {
	k       int
	st      *State
	cursor  []uint64
	written []uint64
	crashed bool
}

type model struct {
	t      *rapid.T
	l      *Ledger
	log    [][]*task // per shard
	r      int
	token  int64
	hs     []*holder
	offers int
}

func (m *model) origin() []transport.Position { return make([]transport.Position, len(m.log)) }

// remap opens the ledger for every index of a new mapping.
func (m *model) remap(r int) {
	m.r = r
	m.token += 2 // leases of another mapping are at least two intervals apart
	m.hs = nil
	for k := range r {
		st, err := m.l.Open(context.Background(), r, m.token, m.origin())
		if err != nil {
			m.t.Fatalf("open %d of %d: %v", k, r, err)
		}
		from := st.From(k)
		h := &holder{k: k, st: st, cursor: make([]uint64, len(m.log)), written: make([]uint64, len(m.log))}
		for s := range m.log {
			h.cursor[s], h.written[s] = from[s].Lo, from[s].Lo
		}
		m.hs = append(m.hs, h)
	}
}

// progress makes holder h read n messages of shard s, offering those it
// owns and the ledger does not call done.
func (m *model) progress(h *holder, s, n int) {
	for ; n > 0 && h.cursor[s] < uint64(len(m.log[s])); n-- {
		p := h.cursor[s]
		x := m.log[s][p]
		if x.id%uint64(m.r) == uint64(h.k) && !h.st.Done(s, transport.Offset(p), x.id) {
			m.offers++
			if x.finished {
				// Offered again: only allowed when the holder that finished
				// it crashed before writing a position past it.
				if b := x.by; !b.crashed || b.written[s] > p {
					m.t.Fatalf("task %d at %d/%d (id %d) offered again to %d of %d; finished by index %d (crashed %v, wrote %d)", p, s, len(m.log[s]), x.id, h.k, m.r, b.k, b.crashed, b.written[s])
				}
			}
			x.finished, x.by = true, h
		}
		h.cursor[s]++
	}
}

func (m *model) write(h *holder) {
	pos := map[int]transport.Position{}
	for s, c := range h.cursor {
		pos[s] = transport.Offset(c)
	}
	if err := m.l.Write(context.Background(), h.st.Current.N, m.token, h.k, pos); err != nil {
		m.t.Fatalf("write of index %d: %v", h.k, err)
	}
	copy(h.written, h.cursor)
}

func TestLedgerNeverOffersFinishedWorkAgain(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(func(*redis.Options) {})
	group := 0
	rapid.Check(t, func(rt *rapid.T) {
		group++
		shards := rapid.IntRange(1, 3).Draw(rt, "shards")
		m := &model{t: rt, l: New(c, fmt.Sprintf("ledger-%d", group)), log: make([][]*task, shards), token: 100}
		m.remap(rapid.IntRange(1, 4).Draw(rt, "r"))
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
			"checkpoint": func(rt *rapid.T) {
				m.write(m.hs[rapid.IntRange(0, len(m.hs)-1).Draw(rt, "k")])
			},
			"clean handover": func(rt *rapid.T) {
				for _, h := range m.hs {
					m.write(h)
				}
				m.remap(rapid.IntRange(1, 4).Draw(rt, "r"))
			},
			"crash and handover": func(rt *rapid.T) {
				crashed := m.hs[rapid.IntRange(0, len(m.hs)-1).Draw(rt, "k")]
				crashed.crashed = true
				for _, h := range m.hs {
					if h != crashed {
						m.write(h)
					}
				}
				m.remap(rapid.IntRange(1, 4).Draw(rt, "r"))
			},
			"": func(rt *rapid.T) {
				// Nothing is lost: every task not yet finished is still ahead
				// of its owner's cursor, and the ledger will offer it.
				for s, sh := range m.log {
					for p, x := range sh {
						if x.finished {
							continue
						}
						h := m.hs[x.id%uint64(m.r)]
						if h.cursor[s] > uint64(p) || h.st.Done(s, transport.Offset(uint64(p)), x.id) {
							rt.Fatalf("task at %d/%d (id %d) will never be offered to its owner, %d of %d", p, s, x.id, h.k, m.r)
						}
					}
				}
			},
		})
	})
}

func TestOpenRefusesAnOlderMappingAndWriteIsFenced(t *testing.T) {
	srv := redistest.Start(t)
	l := New(srv.Client(func(*redis.Options) {}), "fence")
	ctx := context.Background()
	origin := []transport.Position{{}, {}}
	st, err := l.Open(ctx, 3, 10, origin)
	if err != nil || !st.Created || st.Current.N != 1 {
		t.Fatalf("first Open = %+v, %v; want epoch 1 created", st, err)
	}
	if _, err := l.Open(ctx, 2, 14, origin); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Open(ctx, 3, 12, origin); !errors.Is(err, ErrStale) {
		t.Fatalf("Open by an older lease of another mapping = %v; want ErrStale", err)
	}
	one := map[int]transport.Position{0: transport.Offset(5)}
	if err := l.Write(ctx, 1, 12, 0, one); !errors.Is(err, ErrMoved) {
		t.Fatalf("Write to a past epoch = %v; want ErrMoved", err)
	}
	if err := l.Write(ctx, 2, 16, 1, one); err != nil {
		t.Fatal(err)
	}
	if err := l.Write(ctx, 2, 14, 1, one); !errors.Is(err, ErrFenced) {
		t.Fatalf("Write by an older holder of the index = %v; want ErrFenced", err)
	}
	st, _ = l.Read(ctx)
	if got := st.Current.At(0, 1); got != transport.Offset(5) {
		t.Fatalf("position of index 1 in shard 0 = %v; want 5", got)
	}
}
