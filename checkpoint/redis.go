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
	//go:embed common.lua
	commonSource string
	//go:embed open.lua
	openSource string
	//go:embed write.lua
	writeSource string
	//go:embed realign.lua
	realignSource string
	//go:embed head.lua
	headSource string
	//go:embed marks.lua
	marksSource string
	//go:embed ready.lua
	readySource string

	openScript    = newScript(commonSource + openSource)
	writeScript   = newScript(commonSource + writeSource)
	realignScript = newScript(commonSource + realignSource)
	headScript    = newScript(commonSource + headSource)
	marksScript   = newScript(marksSource)
	readyScript   = newScript(commonSource + readySource)
)

// script is one of the ledger's scripts: its source, and go-redis's
// EVALSHA-then-EVAL runner of it.
type script struct {
	src string
	rs  *redis.Script
}

func newScript(src string) *script { return &script{src: src, rs: redis.NewScript(src)} }

// Hash is the script's SHA1, as EVALSHA names it.
func (s *script) Hash() string { return s.rs.Hash() }

// Evaluator runs a ledger script atomically, as Redis's EVAL does (the
// keys, then the arguments), and returns its reply as go-redis does
// (int64, string, []any, nil; an error reply as an error). The ledger on
// Redis uses the client's; package checkpoint/memledger runs the same
// scripts in memory, so that the ledger's rules are the scripts' in both.
type Evaluator interface {
	Eval(ctx context.Context, src string, keys []string, args ...any) (any, error)
}

// clientEvaluator runs scripts on a Redis client (EVALSHA, EVAL when the
// server does not have it).
type clientEvaluator struct{ c redis.UniversalClient }

func (e clientEvaluator) Eval(ctx context.Context, src string, keys []string, args ...any) (any, error) {
	s, ok := scriptsBySource[src]
	if !ok {
		s = newScript(src)
	}
	return s.rs.Run(ctx, e.c, keys, args...).Result()
}

// scriptsBySource finds a script's runner (and its SHA) from its source.
var scriptsBySource = map[string]*script{}

func init() {
	for _, s := range []*script{openScript, writeScript, realignScript, headScript, marksScript, readyScript} {
		scriptsBySource[s.src] = s
	}
}

// run runs s with l's evaluator and returns its reply as a slice.
func (l *Redis) run(ctx context.Context, s *script, keys []string, args ...any) ([]any, error) {
	v, err := l.ev.Eval(ctx, s.src, keys, args...)
	if err != nil {
		return nil, err
	}
	out, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("redis: unexpected type=%T for Slice", v)
	}
	return out, nil
}

// Key is the Redis key of group name's ledger, its head (a hash of every
// epoch's counts, starts and cuts), under the group's hash tag beside the
// lease's key (partition.Key), so that on Redis Cluster both live on one
// node. Beside it, under the same tag: Key+":marks" (a hash of the marks)
// and Key+":lows" (a sorted set that makes each shard's low watermark one
// lookup). Deleting the head loses the ledger: the other two are dropped
// at the next Open.
func Key(group string) string { return partition.KeyPrefix(group) + "ledger" }

// Redis is the ledger of one group in Redis (a single server, Sentinel or
// Cluster): three keys under the group's hash tag, changed only by
// scripts (open, write, realign), each atomic, one round trip to the
// master, and bounded in the work it does by the shards it is given,
// never by replicas x shards (checkpoint/common.lua says how). Marks are
// read a page at a time.
type Redis struct {
	c     redis.UniversalClient // nil with NewOn
	ev    Evaluator
	keys  []string // head, marks, lows
	group string
}

var _ Store = (*Redis)(nil)

// NewRedis returns the ledger of group on client. It does no I/O and
// never closes the client.
func NewRedis(client redis.UniversalClient, group string) *Redis {
	l := NewOn(clientEvaluator{client}, group)
	l.c = client
	return l
}

// NewOn returns the ledger of group whose scripts e runs: the same ledger
// as NewRedis's, on another store of its keys (checkpoint/memledger's, in
// memory). Reset, which watches keys, needs NewRedis's.
func NewOn(e Evaluator, group string) *Redis {
	k := Key(group)
	return &Redis{ev: e, keys: []string{k, k + ":marks", k + ":lows"}, group: group}
}

// pageFields is the most mark fields one read asks for (HMGET): about a
// millisecond of the server's time.
const pageFields = 4096

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

// tooLarge is Open's error for an epoch of r replicas over n shards
// past MaxSlots.
func tooLarge(r, n int) error {
	return fmt.Errorf("%w: %d replicas over %d shards would be %d marks, over the limit of %d: run fewer workers or fewer shards", ErrTooLarge, r, n, r*n, MaxSlots)
}

// Open implements Store.
func (l *Redis) Open(ctx context.Context, req OpenRequest) (*State, error) {
	shards := len(req.Origin)
	if req.Replicas < 1 || req.Replicas > MaxReplicas || shards < 1 || shards > MaxShards || req.Index < 0 || req.Index >= req.Replicas {
		return nil, fmt.Errorf("checkpoint: Open needs 1 <= replicas <= %d, 0 <= index < replicas and 1 to %d shards, got %d, %d and %d", MaxReplicas, MaxShards, req.Replicas, req.Index, shards)
	}
	if req.Replicas*shards > MaxSlots {
		return nil, tooLarge(req.Replicas, shards)
	}
	args := make([]any, 0, 6+3*shards+len(req.Rewound))
	flags := "0"
	if req.Aligned {
		flags = "1"
	}
	if req.Provisional {
		flags += "p"
	}
	args = append(args, req.Replicas, req.Token, req.Index, shards, req.Seen, flags)
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
	for s := range shards {
		p := req.Origin[s]
		if s < len(req.Ends) {
			p = req.Ends[s]
		}
		args = append(args, encode(p))
	}
	for _, s := range req.Rewound {
		if s >= 0 && s < shards {
			args = append(args, s)
		}
	}
	res, err := l.run(ctx, openScript, l.keys, args...)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: open: %w", err)
	}
	if len(res) < 3 {
		return nil, fmt.Errorf("%w: open replied %v", ErrCorrupt, res)
	}
	status, _ := res[0].(string)
	why, _ := res[2].(string)
	switch status {
	case "corrupt":
		return nil, corruptReply(why)
	case "stale":
		return nil, fmt.Errorf("%w: epoch %v has replicas and token %q, this lease has %d and %d", ErrStale, res[1], why, req.Replicas, req.Token)
	case "held":
		return nil, fmt.Errorf("%w: epoch %v: %s", ErrHeld, res[1], why)
	case "toolarge":
		n, _ := strconv.Atoi(why)
		return nil, tooLarge(req.Replicas, n)
	case "shrunk":
		return nil, fmt.Errorf("%w: the ledger's log (epoch %v) is aligned to %s shards, this source has %d: run every worker with all %s (a rolling update that adds shards finishes by itself); to remove shards, stop writing to them, let the group finish them (nandi status), stop it and reset its checkpoints (nandi checkpoint reset)",
			ErrShrunk, res[1], why, shards, why)
	}
	st, err := parseHead(res[3:])
	if err != nil {
		return nil, err
	}
	if st.Current == nil {
		return nil, fmt.Errorf("%w: no current epoch after open", ErrCorrupt)
	}
	n, _ := res[1].(int64)
	st.Created = status == "new" && st.Current.N == n
	words := strings.Fields(why)
	st.Lost, st.Behind, st.TakenOver = slices.Contains(words, "lost"), slices.Contains(words, "behind"), slices.Contains(words, "takeover")
	if err := l.readOwn(ctx, st, req.Index); err != nil {
		return nil, err
	}
	st.index()
	return st, nil
}

// readOwn reads the holder's own marks in the current epoch; the marks
// of older epochs that State.Done needs for its tasks are read as tasks
// below them come (State.Prepare): in all, at most one per old index and
// shard whose tasks the holder meets, however large the group.
func (l *Redis) readOwn(ctx context.Context, st *State, k int) error {
	cur := st.Current
	want := make([]markAt, 0, len(cur.Start))
	for s := range cur.Start {
		want = append(want, markAt{cur, s, k})
	}
	st.load, st.loaded = l.readMarks, map[markAt]bool{}
	return l.readMarks(ctx, want)
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func markField(n int64, s, k int) string {
	return strconv.FormatInt(n, 10) + ":" + strconv.Itoa(s) + ":" + strconv.Itoa(k)
}

// readMarks reads the marks named, a page at a time, into their epochs
// (a mark not found is {Start, Start}).
func (l *Redis) readMarks(ctx context.Context, at []markAt) error {
	for i := 0; i < len(at); i += pageFields {
		j := min(i+pageFields, len(at))
		args := make([]any, 0, j-i)
		for _, a := range at[i:j] {
			args = append(args, markField(a.e.N, a.s, a.k))
		}
		res, err := l.run(ctx, marksScript, l.keys[1:2], args...)
		if err != nil {
			return fmt.Errorf("checkpoint: read marks: %w", err)
		}
		for x, v := range res {
			str, ok := v.(string)
			if !ok {
				continue
			}
			a := at[i+x]
			if a.e.gone[a.s] {
				continue
			}
			m, tok, err := decodeMark(str)
			if err != nil {
				return corrupt(markField(a.e.N, a.s, a.k), "%v", err)
			}
			a.e.Marks[Slot{a.s, a.k}] = m
			a.e.Tokens[Slot{a.s, a.k}] = tok
		}
	}
	return nil
}

// Read implements Store.
func (l *Redis) Read(ctx context.Context) (*State, error) {
	st, err := l.ReadLow(ctx)
	if err != nil || st.Current == nil {
		return st, err
	}
	var want []markAt
	for _, e := range st.History {
		for s := range e.Start {
			for k := range e.R {
				want = append(want, markAt{e, s, k})
			}
		}
	}
	if err := l.readMarks(ctx, want); err != nil {
		return nil, err
	}
	for _, e := range st.History {
		if err := l.readOpened(ctx, e); err != nil {
			return nil, err
		}
	}
	st.index()
	return st, nil
}

// readOpened reads which token last opened e for each index.
func (l *Redis) readOpened(ctx context.Context, e *Epoch) error {
	for i := 0; i < e.R; i += pageFields {
		j := min(i+pageFields, e.R)
		args := make([]any, 0, j-i)
		for k := i; k < j; k++ {
			args = append(args, strconv.FormatInt(e.N, 10)+":o:"+strconv.Itoa(k))
		}
		res, err := l.run(ctx, marksScript, l.keys[1:2], args...)
		if err != nil {
			return fmt.Errorf("checkpoint: read marks: %w", err)
		}
		for x, v := range res {
			if str, ok := v.(string); ok {
				e.Opened[i+x], _ = strconv.ParseInt(str, 10, 64)
			}
		}
	}
	return nil
}

// ReadLow implements Store.
func (l *Redis) ReadLow(ctx context.Context) (*State, error) {
	res, err := l.run(ctx, headScript, l.keys)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read: %w", err)
	}
	if len(res) < 1 {
		return nil, fmt.Errorf("%w: read replied %v", ErrCorrupt, res)
	}
	st, err := parseHead(res[1:])
	if err != nil || st.Current == nil {
		return st, err
	}
	lows, _ := res[0].(string)
	fs := strings.Fields(lows)
	if len(fs) != len(st.Current.Start) {
		return nil, fmt.Errorf("%w: %d low watermarks for %d shards", ErrCorrupt, len(fs), len(st.Current.Start))
	}
	st.Current.lows = make([]transport.Position, len(fs))
	for s, f := range fs {
		if st.Current.lows[s], err = decode(f); err != nil {
			return nil, corrupt(fmt.Sprintf("%d:%d:*", st.Current.N, s), "the low watermark: %v", err)
		}
	}
	st.index()
	return st, nil
}

// Realign implements Store.
func (l *Redis) Realign(ctx context.Context, req RealignRequest) error {
	kind := "misaligned"
	if req.Late {
		kind = "late"
	}
	what := fmt.Sprintf("shard %d (%s) position %v: key %q, of shard %s", req.Shard, req.Destination, req.Position, req.Key, kind)
	args := []any{req.Epoch, req.Token, req.Replicas, kind, what + " at " + time.Now().UTC().Format(time.RFC3339)}
	for _, p := range req.Ends {
		args = append(args, encode(p))
	}
	res, err := l.run(ctx, realignScript, l.keys, args...)
	if err != nil {
		return fmt.Errorf("checkpoint: realign: %w", err)
	}
	switch res[0] {
	case "new":
		return nil
	case "corrupt":
		why, _ := res[2].(string)
		return corruptReply(why)
	case "wait":
		return fmt.Errorf("%w: epoch %v: %v", ErrWait, res[1], res[2])
	}
	return fmt.Errorf("%w: epoch %d, now %v of %v replicas", ErrMoved, req.Epoch, res[1], res[2])
}

// corruptReply is the error of a script's {"corrupt", 0, "field = value"}.
func corruptReply(why string) error {
	f, v, _ := strings.Cut(why, " = ")
	switch {
	case f == "v":
		return corrupt(f, "%q: a ledger of another format (nandi before format 3 kept its marks in this hash): stop the group and delete this key; workers that saw it recreate it from where they knew every index was (work may be done again, none is skipped)", v)
	case f == "cur" || f == "hist":
		return corrupt(f, "%q: the current epoch must be a number listed in hist", v)
	case strings.Contains(f, ":start:"):
		return corrupt(f, "missing: the epoch has that shard")
	}
	return corrupt(f, "%q: an epoch's replicas must be whole numbers from 1 to %d and its shards from 1 to %d, at most %d marks in all", v, MaxReplicas, MaxShards, MaxSlots)
}

// Write implements Store.
func (l *Redis) Write(ctx context.Context, w WriteRequest) error {
	args := make([]any, 0, 4+4*len(w.Marks))
	replicas := strconv.Itoa(max(w.Replicas, 0))
	if w.Release {
		replicas += "r"
	}
	args = append(args, w.Epoch, w.Token, w.Index, replicas)
	for s, m := range w.Marks {
		high := m.High
		if high.Less(m.Low) {
			high = m.Low
		}
		if !sortedBetween(m.Undone, m.Low, high) {
			return fmt.Errorf("checkpoint: write: the unfinished positions of shard %d must ascend strictly between Low %v and High %v", s, m.Low, high)
		}
		low, hi, und := encodeMarkArgs(m)
		args = append(args, s, low, hi, und)
	}
	res, err := l.run(ctx, writeScript, l.keys, args...)
	if err != nil {
		return fmt.Errorf("checkpoint: write: %w", err)
	}
	switch res[0] {
	case "ok":
		return nil
	case "late":
		return fmt.Errorf("%w: epoch %d, now %v", ErrLate, w.Epoch, res[1])
	case "badshard":
		return fmt.Errorf("checkpoint: write: shard %v is not one of epoch %d's", res[1], w.Epoch)
	case "moved":
		if len(res) > 2 && w.Replicas > 0 {
			return fmt.Errorf("%w: epoch %d of %d replicas, the ledger's is now epoch %v of %v", ErrMoved, w.Epoch, w.Replicas, res[1], res[2])
		}
		return fmt.Errorf("%w: epoch %d, now %v", ErrMoved, w.Epoch, res[1])
	default:
		return fmt.Errorf("%w: index %d of epoch %d held by token %v, this is %d", ErrFenced, w.Index, w.Epoch, res[1], w.Token)
	}
}

// Ready implements Store.
func (l *Redis) Ready(ctx context.Context, req ReadyRequest) (ready, held int, err error) {
	res, err := l.run(ctx, readyScript, l.keys, req.Epoch, req.Token, req.Index, req.Replicas)
	if err != nil {
		return 0, 0, fmt.Errorf("checkpoint: ready: %w", err)
	}
	switch res[0] {
	case "ok":
		r, _ := res[1].(int64)
		h, _ := res[2].(int64)
		return int(r), int(h), nil
	case "moved":
		return 0, 0, fmt.Errorf("%w: epoch %d", ErrMoved, req.Epoch)
	case "corrupt":
		why, _ := res[2].(string)
		return 0, 0, corruptReply(why)
	default:
		return 0, 0, fmt.Errorf("%w: index %d of epoch %d", ErrFenced, req.Index, req.Epoch)
	}
}
