// Package ledger is the checkpoint ledger of PROTOCOL.md: per mapping epoch,
// per shard, per index, the position below which every task of that index
// is done. It lives in the lease's Redis, in one hash under the group's
// hash tag ({name}:ledger), and changes only through two scripts: Open
// (which creates the next epoch when the replicas change) and Write (fenced
// by epoch and by lease token).
//
// A holder of (k, r) reads shard s from State.From(k)[s] and skips a task at
// position p with id x when State.Done(s, p, x): some epoch still in the
// history had already finished it. After a clean handover (every holder
// wrote its final positions) nothing is offered twice; after a crash, only
// what came after the crashed holder's last write is.
package ledger

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

var (
	//go:embed open.lua
	openSource string
	//go:embed write.lua
	writeSource string

	openScript  = redis.NewScript(openSource)
	writeScript = redis.NewScript(writeSource)
)

// ErrStale is returned by Open when the current epoch has other replicas
// and was created by a newer lease: the caller's lease is over.
var ErrStale = errors.New("ledger: a newer mapping owns the ledger")

// ErrMoved is returned by Write when its epoch is no longer current.
var ErrMoved = errors.New("ledger: the epoch has moved on")

// ErrFenced is returned by Write when a newer holder of the index has
// written in the epoch.
var ErrFenced = errors.New("ledger: a newer holder has written this index")

// Key is the ledger's key for group name.
func Key(name string) string { return "{" + name + "}:ledger" }

// Ledger is one group's ledger.
type Ledger struct {
	c   redis.UniversalClient
	key string
}

// New returns the ledger of group name on c.
func New(c redis.UniversalClient, name string) *Ledger {
	return &Ledger{c: c, key: Key(name)}
}

// Epoch is one mapping's checkpoints.
type Epoch struct {
	N      int64 // epoch number, from 1
	R      int   // replicas of the mapping
	Token  int64 // token of the lease that created it
	Start  []transport.Position
	Pos    map[Slot]transport.Position // written positions; others are Start
	Tokens map[Slot]int64              // token of each position's writer
}

// Slot names one index's place in one shard.
type Slot struct{ Shard, Index int }

// At returns the position of index k in shard s.
func (e *Epoch) At(s, k int) transport.Position {
	if p, ok := e.Pos[Slot{s, k}]; ok {
		return p
	}
	if s < len(e.Start) {
		return e.Start[s]
	}
	return transport.Position{}
}

// State is the ledger as a holder opened it.
type State struct {
	Current *Epoch
	History []*Epoch // every epoch still needed, oldest first, Current last
	Created bool     // this Open created Current
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
// finished by an epoch of the history.
func (st *State) Done(s int, p transport.Position, x uint64) bool {
	for _, e := range st.History {
		if p.Less(e.At(s, int(x%uint64(e.R)))) {
			return true
		}
	}
	return false
}

func encode(p transport.Position) string { return fmt.Sprintf("%020d-%020d", p.Hi, p.Lo) }

func decode(s string) (transport.Position, error) {
	hi, lo, ok := strings.Cut(s, "-")
	h, err1 := strconv.ParseUint(hi, 10, 64)
	l, err2 := strconv.ParseUint(lo, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return transport.Position{}, fmt.Errorf("ledger: bad position %q", s)
	}
	return transport.Position{Hi: h, Lo: l}, nil
}

// Open opens the ledger for the holder of a lease with replicas r and
// token tok over a source of the given shards; origin is where each shard
// starts for a group with no ledger yet.
func (l *Ledger) Open(ctx context.Context, r int, tok int64, origin []transport.Position) (*State, error) {
	if r < 1 || len(origin) < 1 {
		return nil, fmt.Errorf("ledger: Open needs replicas >= 1 and at least one shard, got %d and %d", r, len(origin))
	}
	args := []any{r, tok, len(origin)}
	for _, p := range origin {
		args = append(args, encode(p))
	}
	res, err := openScript.Run(ctx, l.c, []string{l.key}, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("ledger: open: %w", err)
	}
	if len(res) < 2 {
		return nil, fmt.Errorf("ledger: open: unexpected reply %v", res)
	}
	if res[0] == "stale" {
		return nil, fmt.Errorf("%w: epoch %v has replicas %v from token %v, this lease has %d from token %d", ErrStale, res[1], res[2], res[3], r, tok)
	}
	st, err := l.Read(ctx)
	if err != nil {
		return nil, err
	}
	st.Created = res[0] == "new" && st.Current.N == res[1].(int64)
	return st, nil
}

// Read returns the ledger as it is, without changing it (nil Current when
// the group has none).
func (l *Ledger) Read(ctx context.Context) (*State, error) {
	all, err := l.c.HGetAll(ctx, l.key).Result()
	if err != nil {
		return nil, fmt.Errorf("ledger: read: %w", err)
	}
	st := &State{}
	if all["cur"] == "" {
		return st, nil
	}
	cur, _ := strconv.ParseInt(all["cur"], 10, 64)
	for _, h := range strings.Fields(all["hist"]) {
		n, _ := strconv.ParseInt(h, 10, 64)
		e, err := parseEpoch(all, n)
		if err != nil {
			return nil, err
		}
		st.History = append(st.History, e)
		if n == cur {
			st.Current = e
		}
	}
	if st.Current == nil {
		return nil, fmt.Errorf("ledger: current epoch %d is not in the history %q", cur, all["hist"])
	}
	return st, nil
}

func parseEpoch(all map[string]string, n int64) (*Epoch, error) {
	p := strconv.FormatInt(n, 10) + ":"
	e := &Epoch{N: n, Pos: map[Slot]transport.Position{}, Tokens: map[Slot]int64{}}
	e.R, _ = strconv.Atoi(all[p+"r"])
	e.Token, _ = strconv.ParseInt(all[p+"tok"], 10, 64)
	shards, _ := strconv.Atoi(all[p+"shards"])
	if e.R < 1 || shards < 1 {
		return nil, fmt.Errorf("ledger: epoch %d is incomplete", n)
	}
	e.Start = make([]transport.Position, shards)
	for s := range shards {
		x, err := decode(all[p+"start:"+strconv.Itoa(s)])
		if err != nil {
			return nil, err
		}
		e.Start[s] = x
	}
	for f, v := range all {
		rest, ok := strings.CutPrefix(f, p)
		if !ok {
			continue
		}
		var kind string
		var s, k int
		if _, err := fmt.Sscanf(strings.ReplaceAll(rest, ":", " "), "%s %d %d", &kind, &s, &k); err != nil {
			continue
		}
		switch kind {
		case "pos":
			x, err := decode(v)
			if err != nil {
				return nil, err
			}
			e.Pos[Slot{s, k}] = x
		case "ptok":
			e.Tokens[Slot{s, k}], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return e, nil
}

// Write records that every task of index k below pos[s] in shard s is
// done, for the holder of a lease with token tok in epoch e.
func (l *Ledger) Write(ctx context.Context, e, tok int64, k int, pos map[int]transport.Position) error {
	if len(pos) == 0 {
		return nil
	}
	args := []any{e, tok, k}
	for s, p := range pos {
		args = append(args, s, encode(p))
	}
	res, err := writeScript.Run(ctx, l.c, []string{l.key}, args...).Slice()
	if err != nil {
		return fmt.Errorf("ledger: write: %w", err)
	}
	switch res[0] {
	case "ok":
		return nil
	case "moved":
		return fmt.Errorf("%w: epoch %d, now %v", ErrMoved, e, res[1])
	default:
		return fmt.Errorf("%w: index %d of epoch %d written by token %v, this is %d", ErrFenced, k, e, res[1], tok)
	}
}
