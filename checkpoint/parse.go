package checkpoint

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nandi-go/nandi/transport"
)

// MaxReplicas and MaxShards bound what a ledger may say of an epoch:
// replicas and shards above them (and below 1) are refused as corrupt, by
// the scripts and by the parser, so that a damaged or hostile ledger can
// neither stall the store in a script's loop nor make a reader allocate
// without bound. MaxSlots bounds their product: the marks an epoch can
// have. Open refuses requests beyond them. The largest sizes measured
// (docs/figures.md, "The ledger at scale") are 2,100 workers on one
// shard and 1,000 workers on 48 shards.
//
// MaxHistory bounds the epochs a realign keeps in the history: past it,
// it waits (ErrWait) until the group's marks have moved the low
// watermarks up, so that late entries, however many, never grow the
// ledger without bound.
const (
	MaxHistory  = 8
	MaxReplicas = 65536
	MaxShards   = 1024
	MaxSlots    = 1 << 20
)

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

// decodeMark reads a mark's field: "LOW HIGH TOKEN[ UNDONE...]". Undone
// outside (Low, High) is dropped (such a task is not done), and a High
// below Low is Low.
func decodeMark(v string) (Mark, int64, error) {
	parts := strings.SplitN(v, " ", 4)
	if len(parts) < 3 {
		return Mark{}, 0, fmt.Errorf("%q is not \"LOW HIGH TOKEN[ UNDONE]\"", v)
	}
	var m Mark
	var err error
	if m.Low, err = decode(parts[0]); err != nil {
		return Mark{}, 0, err
	}
	if m.High, err = decode(parts[1]); err != nil {
		return Mark{}, 0, err
	}
	tok, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return Mark{}, 0, fmt.Errorf("token %q: %v", parts[2], err)
	}
	if len(parts) == 4 {
		if m.Undone, err = decodeUndone(parts[3]); err != nil {
			return Mark{}, 0, err
		}
	}
	if m.High.Less(m.Low) {
		m.High = m.Low
	}
	m.Undone = slices.DeleteFunc(m.Undone, func(p transport.Position) bool { return !m.Low.Less(p) || !p.Less(m.High) })
	return m, tok, nil
}

// encodeMark is what decodeMark reads, less the token (write.lua adds it).
func encodeMarkArgs(m Mark) (low, high, undone string) {
	high = encode(m.High)
	if m.High.Less(m.Low) {
		high = encode(m.Low)
	}
	return encode(m.Low), high, encodeUndone(m.Undone)
}

// parseHead reads the head's HGETALL reply: every epoch of the history,
// without marks.
func parseHead(flat []any) (*State, error) {
	all := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		f, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		all[f] = v
	}
	st := &State{Misplaced: all["misplaced"]}
	if all["cur"] == "" {
		return st, nil
	}
	if v := all["v"]; v != "3" && v != "4" {
		return nil, corruptReply("v = " + v)
	}
	cur, err := strconv.ParseInt(all["cur"], 10, 64)
	if err != nil {
		return nil, corrupt("cur", "%q is not an epoch number", all["cur"])
	}
	byN := map[int64]*Epoch{}
	for _, h := range strings.Fields(all["hist"]) {
		n, err := strconv.ParseInt(h, 10, 64)
		if err != nil || byN[n] != nil {
			return nil, corrupt("hist", "%q is not a list of epoch numbers", all["hist"])
		}
		e, err := parseEpoch(all, n)
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
	for f := range all {
		ns, rest, ok := strings.Cut(f, ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(ns, 10, 64)
		e := byN[n]
		if err != nil || e == nil {
			continue
		}
		kind, shard, two := strings.Cut(rest, ":")
		if !two {
			continue // a field of the epoch itself (r, tok, shards, aligned, ...)
		}
		switch kind {
		case "start", "cut", "hi", "wait", "gone", "rend":
			if s, err := strconv.Atoi(shard); err != nil || s < 0 || s >= len(e.Start) {
				return nil, corrupt(f, "shard %q outside the epoch's 0..%d", shard, len(e.Start)-1)
			}
		}
	}
	return st, nil
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

// optionalCount is count for a field that may be absent or 0.
func optionalCount(all map[string]string, field string, max int) (int, error) {
	if v, ok := all[field]; !ok || v == "0" {
		return 0, nil
	}
	return count(all, field, max)
}

func parseEpoch(all map[string]string, n int64) (*Epoch, error) {
	p := strconv.FormatInt(n, 10) + ":"
	e := &Epoch{N: n, Marks: map[Slot]Mark{}, Tokens: map[Slot]int64{}, Opened: map[int]int64{}, Cut: map[int]transport.Position{}, gone: map[int]bool{}, Why: all[p+"why"],
		Fenced: all[p+"fence"] == "1"}
	e.Held, _ = strconv.Atoi(all[p+"held"])
	e.Ready, _ = strconv.Atoi(all[p+"ready"])
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
	if e.Aligned, err = optionalCount(all, p+"aligned", MaxShards); err != nil {
		return nil, err
	}
	if e.Was, err = optionalCount(all, p+"was", MaxShards); err != nil {
		return nil, err
	}
	if v, ok := all[p+"unreleased"]; ok {
		if e.Unreleased, err = parseUnreleased(all, p, v, shards); err != nil {
			return nil, err
		}
	}
	e.Start = make([]transport.Position, shards)
	e.High = make([]transport.Position, shards)
	for s := range shards {
		sf := strconv.Itoa(s)
		f := p + "start:" + sf
		v, ok := all[f]
		if !ok {
			return nil, corrupt(f, "missing: the epoch has %d shards", shards)
		}
		if e.Start[s], err = decode(v); err != nil {
			return nil, corrupt(f, "%v", err)
		}
		e.High[s] = e.Start[s]
		if v, ok := all[p+"hi:"+sf]; ok {
			if e.High[s], err = decode(v); err != nil {
				return nil, corrupt(p+"hi:"+sf, "%v", err)
			}
		}
		if v, ok := all[p+"cut:"+sf]; ok {
			c, err := decode(v)
			if err != nil {
				return nil, corrupt(p+"cut:"+sf, "%v", err)
			}
			e.Cut[s] = c
		}
		if all[p+"gone:"+sf] != "" {
			e.gone[s] = true
		}
	}
	return e, nil
}

// corrupt says which field of the ledger is unreadable and why.
func corrupt(field, format string, args ...any) error {
	return fmt.Errorf("%w: field %q: %s (repair the field, or delete the ledger's key %s; see docs/PROTOCOL.md, \"Checkpoints\")", ErrCorrupt, field, fmt.Sprintf(format, args...), "{group}:ledger")
}

// parseUnreleased parses an epoch's unreleased field ("R k1 k2 ...": the
// former epoch's replicas, then its indexes not released) and its shards'
// rend fields.
func parseUnreleased(all map[string]string, p, v string, shards int) (*Unreleased, error) {
	f := p + "unreleased"
	words := strings.Fields(v)
	bad := func() (*Unreleased, error) {
		return nil, corrupt(f, "%q is not replicas from 1 to %d and then indexes below them, ascending", v, MaxReplicas)
	}
	if len(words) < 2 {
		return bad()
	}
	u := &Unreleased{Ends: make([]transport.Position, shards)}
	var err error
	if u.Replicas, err = strconv.Atoi(words[0]); err != nil || u.Replicas < 1 || u.Replicas > MaxReplicas || len(words)-1 > u.Replicas {
		return bad()
	}
	for _, w := range words[1:] {
		k, err := strconv.Atoi(w)
		if err != nil || k < 0 || k >= u.Replicas || (len(u.Indexes) > 0 && k <= u.Indexes[len(u.Indexes)-1]) {
			return bad()
		}
		u.Indexes = append(u.Indexes, k)
	}
	for s := range shards {
		rf := p + "rend:" + strconv.Itoa(s)
		rv, ok := all[rf]
		if !ok {
			continue // a shard the log did not have then: nothing of it was read
		}
		if u.Ends[s], err = decode(rv); err != nil {
			return nil, corrupt(rf, "%q: %v", rv, err)
		}
	}
	return u, nil
}
