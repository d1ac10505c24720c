package checkpoint

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

var (
	//go:embed open.lua
	openSource string
	//go:embed write.lua
	writeSource string
	//go:embed read.lua
	readSource string

	openScript  = redis.NewScript(openSource)
	writeScript = redis.NewScript(writeSource)
	readScript  = redis.NewScript(readSource)
)

// Key is the Redis key of group name's ledger: a hash under the group's
// hash tag, beside the lease's key (partition.Key), so that on Redis
// Cluster both live on one node.
func Key(group string) string { return partition.KeyPrefix(group) + "ledger" }

// Redis is the ledger of one group in Redis (a single server, Sentinel or
// Cluster): one hash, changed only by two scripts, read by a third, so
// that every operation is one atomic round trip to the master.
type Redis struct {
	c     redis.UniversalClient
	key   string
	group string
}

var _ Store = (*Redis)(nil)

// NewRedis returns the ledger of group on client. It does no I/O and
// never closes the client.
func NewRedis(client redis.UniversalClient, group string) *Redis {
	return &Redis{c: client, key: Key(group), group: group}
}

// sortedBetween reports whether ps ascend strictly, each between low and
// high (exclusive).
func sortedBetween(ps []transport.Position, low, high transport.Position) bool {
	for i, p := range ps {
		if !low.Less(p) || !p.Less(high) || (i > 0 && !ps[i-1].Less(p)) {
			return false
		}
	}
	return true
}

func encode(p transport.Position) string { return fmt.Sprintf("%020d-%020d", p.Hi, p.Lo) }

func decode(s string) (transport.Position, error) {
	hi, lo, ok := strings.Cut(s, "-")
	h, err1 := strconv.ParseUint(hi, 10, 64)
	l, err2 := strconv.ParseUint(lo, 10, 64)
	if !ok || err1 != nil || err2 != nil || len(hi) != 20 || len(lo) != 20 {
		return transport.Position{}, fmt.Errorf("%w: bad position %q", ErrCorrupt, s)
	}
	return transport.Position{Hi: h, Lo: l}, nil
}

// Open implements Store.
func (l *Redis) Open(ctx context.Context, req OpenRequest) (*State, error) {
	shards := len(req.Origin)
	if req.Replicas < 1 || shards < 1 || req.Index < 0 || req.Index >= req.Replicas {
		return nil, fmt.Errorf("checkpoint: Open needs replicas >= 1, 0 <= index < replicas and at least one shard, got %d, %d and %d", req.Replicas, req.Index, shards)
	}
	args := make([]any, 0, 6+2*shards+len(req.Rewound))
	aligned := 0
	if req.Aligned {
		aligned = 1
	}
	args = append(args, req.Replicas, req.Token, req.Index, shards, req.Seen, aligned)
	for _, p := range req.Origin {
		args = append(args, encode(p))
	}
	for s := range shards {
		p := req.Origin[s]
		if req.Seen > 0 && s < len(req.SeenStart) {
			p = req.SeenStart[s]
		}
		args = append(args, encode(p))
	}
	for _, s := range req.Rewound {
		if s >= 0 && s < shards {
			args = append(args, s)
		}
	}
	res, err := openScript.Run(ctx, l.c, []string{l.key}, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("checkpoint: open: %w", err)
	}
	if len(res) < 3 {
		return nil, fmt.Errorf("%w: open replied %v", ErrCorrupt, res)
	}
	status, _ := res[0].(string)
	why, _ := res[2].(string)
	if status == "corrupt" {
		f, v, _ := strings.Cut(why, " = ")
		return nil, corrupt(f, "%q: an epoch's replicas and shards must be whole numbers from 1 to %d, at most %d marks in all", v, MaxShards, MaxSlots)
	}
	if status == "stale" {
		return nil, fmt.Errorf("%w: epoch %v has replicas and token %q, this lease has %d and %d", ErrStale, res[1], why, req.Replicas, req.Token)
	}
	st, err := parse(res[3:])
	if err != nil {
		return nil, err
	}
	if st.Current == nil {
		return nil, fmt.Errorf("%w: no current epoch after open", ErrCorrupt)
	}
	n, _ := res[1].(int64)
	st.Created = status == "new" && st.Current.N == n
	st.Lost, st.Behind = why == "lost", why == "behind"
	return st, nil
}

// Read implements Store.
func (l *Redis) Read(ctx context.Context) (*State, error) {
	res, err := readScript.Run(ctx, l.c, []string{l.key}).Slice()
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read: %w", err)
	}
	return parse(res)
}

// Write implements Store.
func (l *Redis) Write(ctx context.Context, w WriteRequest) error {
	if len(w.Marks) == 0 {
		return nil
	}
	args := make([]any, 0, 4+4*len(w.Marks))
	args = append(args, w.Epoch, w.Token, w.Index, max(w.Replicas, 0))
	for s, m := range w.Marks {
		high := m.High
		if high.Less(m.Low) {
			high = m.Low
		}
		if !sortedBetween(m.Undone, m.Low, high) {
			return fmt.Errorf("checkpoint: write: the unfinished positions of shard %d must ascend strictly between Low %v and High %v", s, m.Low, high)
		}
		args = append(args, s, encode(m.Low), encode(high), encodeUndone(m.Undone))
	}
	res, err := writeScript.Run(ctx, l.c, []string{l.key}, args...).Slice()
	if err != nil {
		return fmt.Errorf("checkpoint: write: %w", err)
	}
	switch res[0] {
	case "ok":
		return nil
	case "moved":
		if len(res) > 2 && w.Replicas > 0 {
			return fmt.Errorf("%w: epoch %d of %d replicas, the ledger's is now epoch %v of %v", ErrMoved, w.Epoch, w.Replicas, res[1], res[2])
		}
		return fmt.Errorf("%w: epoch %d, now %v", ErrMoved, w.Epoch, res[1])
	default:
		return fmt.Errorf("%w: index %d of epoch %d held by token %v, this is %d", ErrFenced, w.Index, w.Epoch, res[1], w.Token)
	}
}

// parse reads HGETALL's flat reply.
func parse(flat []any) (*State, error) {
	all := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		f, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		all[f] = v
	}
	st := &State{}
	if all["cur"] == "" {
		return st, nil
	}
	cur, err := strconv.ParseInt(all["cur"], 10, 64)
	if err != nil {
		return nil, corrupt("cur", "%q is not an epoch number", all["cur"])
	}
	byN := map[int64]*Epoch{}
	for _, h := range strings.Fields(all["hist"]) {
		n, err := strconv.ParseInt(h, 10, 64)
		if err != nil {
			return nil, corrupt("hist", "%q is not a list of epoch numbers", all["hist"])
		}
		e, err := parseHead(all, n)
		if err != nil {
			return nil, err
		}
		byN[n] = e
		st.History = append(st.History, e)
		if n == cur {
			st.Current = e
		}
	}
	if st.Current == nil {
		return nil, corrupt("hist", "the current epoch %d is not in the history %q", cur, all["hist"])
	}
	for f, v := range all {
		ns, rest, ok := strings.Cut(f, ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(ns, 10, 64)
		e := byN[n]
		if err != nil || e == nil {
			continue
		}
		if err := e.field(rest, v); err != nil {
			return nil, corrupt(f, "%v", err)
		}
	}
	for _, e := range st.History {
		e.index()
	}
	st.index()
	return st, nil
}

// MaxReplicas and MaxShards bound what a ledger may say of an epoch:
// replicas and shards above them (and below 1) are refused as corrupt, by
// the scripts and by the parser, so that a damaged or hostile ledger can
// neither stall the store in a script's loop nor make a reader allocate
// without bound. A group of thousands of workers over more than a few
// hundred shards is far beyond what the lease is built for.
// MaxSlots bounds their product: the marks an epoch can have, which
// opening a new epoch reads one by one.
const (
	MaxReplicas = 65536
	MaxShards   = 65536
	MaxSlots    = 1 << 20
)

// corrupt says which field of the ledger is unreadable and why.
func corrupt(field, format string, args ...any) error {
	return fmt.Errorf("%w: field %q: %s (repair or delete the ledger's hash; see docs/PROTOCOL.md, \"Checkpoints\")", ErrCorrupt, field, fmt.Sprintf(format, args...))
}

// count parses a count of an epoch's head that must lie in [1, max].
func count(all map[string]string, field string, max int) (int, error) {
	v, ok := all[field]
	if !ok {
		return 0, corrupt(field, "missing: the epoch is incomplete")
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, corrupt(field, "%q is not a whole number from 1 to %d", v, max)
	}
	return n, nil
}

func parseHead(all map[string]string, n int64) (*Epoch, error) {
	p := strconv.FormatInt(n, 10) + ":"
	e := &Epoch{N: n, Marks: map[Slot]Mark{}, Tokens: map[Slot]int64{}, Opened: map[int]int64{}}
	var err error
	if e.R, err = count(all, p+"r", MaxReplicas); err != nil {
		return nil, err
	}
	shards, err := count(all, p+"shards", MaxShards)
	if err != nil {
		return nil, err
	}
	if e.R*shards > MaxSlots {
		return nil, corrupt(p+"shards", "%d shards of %d replicas is over %d marks", shards, e.R, MaxSlots)
	}
	e.Token, _ = strconv.ParseInt(all[p+"tok"], 10, 64)
	if ms, err := strconv.ParseInt(all[p+"reset"], 10, 64); err == nil && ms > 0 {
		e.ResetAt = time.UnixMilli(ms).UTC()
	}
	if v, ok := all[p+"aligned"]; ok && v != "0" {
		if e.Aligned, err = count(all, p+"aligned", MaxShards); err != nil {
			return nil, err
		}
	}
	e.Start = make([]transport.Position, shards)
	for s := range shards {
		f := p + "start:" + strconv.Itoa(s)
		v, ok := all[f]
		if !ok {
			return nil, corrupt(f, "missing: the epoch has %d shards", shards)
		}
		x, err := decode(v)
		if err != nil {
			return nil, corrupt(f, "%v", err)
		}
		e.Start[s] = x
	}
	return e, nil
}

// field reads one field "kind:..." of the epoch. Shards and indexes
// outside the epoch are errors: nothing the scripts write has them.
func (e *Epoch) field(rest, v string) error {
	kind, slot, _ := strings.Cut(rest, ":")
	ss, ks, two := strings.Cut(slot, ":")
	s, err1 := strconv.Atoi(ss)
	k, err2 := strconv.Atoi(ks)
	switch kind {
	case "otok":
		if err1 != nil || two || s < 0 || s >= e.R {
			return fmt.Errorf("index %q outside the epoch's 0..%d", slot, e.R-1)
		}
		e.Opened[s], _ = strconv.ParseInt(v, 10, 64)
		return nil
	case "pos", "top", "und", "ptok":
		switch {
		case !two || err1 != nil || err2 != nil:
			return fmt.Errorf("%q is not shard:index", slot)
		case s < 0 || s >= len(e.Start):
			return fmt.Errorf("shard %d outside the epoch's 0..%d", s, len(e.Start)-1)
		case k < 0 || k >= e.R:
			return fmt.Errorf("index %d outside the epoch's 0..%d", k, e.R-1)
		}
	default:
		return nil // a field of the epoch itself (r, tok, shards, start)
	}
	sl := Slot{s, k}
	m, ok := e.Marks[sl]
	if !ok {
		m = Mark{Low: e.Start[s]}
	}
	switch kind {
	case "pos":
		x, err := decode(v)
		if err != nil {
			return err
		}
		m.Low = x
	case "top":
		x, err := decode(v)
		if err != nil {
			return err
		}
		m.High = x
	case "und":
		ps, err := decodeUndone(v)
		if err != nil {
			return err
		}
		m.Undone = ps
	case "ptok":
		e.Tokens[sl], _ = strconv.ParseInt(v, 10, 64)
		return nil
	default:
		return nil
	}
	e.Marks[sl] = m
	return nil
}

// maxGrid is the most marks an epoch keeps in its grid (a slice per
// shard, for Mark's lookups on the per-message path); a larger epoch
// answers Mark from its map of written marks.
const maxGrid = 1 << 16

// index settles the marks read field by field (a High below Low means
// none was written; Undone outside (Low, High) is dropped: such a task is
// not done) and builds the grid Mark reads.
func (e *Epoch) index() {
	for sl, m := range e.Marks {
		if m.High.Less(m.Low) {
			m.High = m.Low
		}
		slices.SortFunc(m.Undone, transport.Position.Compare)
		m.Undone = slices.DeleteFunc(m.Undone, func(p transport.Position) bool { return !m.Low.Less(p) || !p.Less(m.High) })
		e.Marks[sl] = m
	}
	e.grid = nil
	if len(e.Start)*e.R > maxGrid {
		return
	}
	e.grid = make([][]Mark, len(e.Start))
	for s := range e.grid {
		e.grid[s] = make([]Mark, e.R)
		for k := range e.R {
			e.grid[s][k] = Mark{Low: e.Start[s], High: e.Start[s]}
		}
	}
	for sl, m := range e.Marks {
		e.grid[sl.Shard][sl.Index] = m
	}
}
