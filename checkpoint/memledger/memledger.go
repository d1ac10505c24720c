package memledger

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/redis/go-redis/v9"
	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// Store is an in-memory keyspace that runs ledger scripts.
type Store struct {
	mu     sync.Mutex
	hashes map[string]*hash
	zsets  map[string]map[string]float64
	protos map[string]*lua.FunctionProto
	calls  int
}

// New returns an empty store.
func New() *Store {
	return &Store{hashes: map[string]*hash{}, zsets: map[string]map[string]float64{}, protos: map[string]*lua.FunctionProto{}}
}

// Ledger returns group's ledger on s.
func (s *Store) Ledger(group string) *checkpoint.Redis { return checkpoint.NewOn(s, group) }

// Calls is how many scripts s has run.
func (s *Store) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// Clear loses every key, as a Redis restarted without persistence does.
func (s *Store) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hashes, s.zsets = map[string]*hash{}, map[string]map[string]float64{}
}

// Delete deletes keys, as DEL does: a ledger lost under its workers.
func (s *Store) Delete(keys ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		delete(s.hashes, k)
		delete(s.zsets, k)
	}
}

var _ checkpoint.Evaluator = (*Store)(nil)

// Eval runs src with KEYS and ARGV, atomically, and converts its reply as
// Redis and go-redis do.
func (s *Store) Eval(ctx context.Context, src string, keys []string, args ...any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	proto, err := s.compile(src)
	if err != nil {
		return nil, err
	}
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	kt := L.NewTable()
	for _, k := range keys {
		kt.Append(lua.LString(k))
	}
	L.SetGlobal("KEYS", kt)
	at := L.NewTable()
	for _, a := range args {
		at.Append(lua.LString(argString(a)))
	}
	L.SetGlobal("ARGV", at)
	rt := L.NewTable()
	rt.RawSetString("call", L.NewFunction(s.call))
	L.SetGlobal("redis", rt)
	L.Push(L.NewFunctionFromProto(proto))
	if err := L.PCall(0, 1, nil); err != nil {
		return nil, fmt.Errorf("memledger: %v", err)
	}
	return reply(L.Get(-1), true)
}

func (s *Store) compile(src string) (*lua.FunctionProto, error) {
	if p, ok := s.protos[src]; ok {
		return p, nil
	}
	chunk, err := parse.Parse(strings.NewReader(src), "script")
	if err != nil {
		return nil, fmt.Errorf("memledger: %w", err)
	}
	p, err := lua.Compile(chunk, "script")
	if err != nil {
		return nil, fmt.Errorf("memledger: %w", err)
	}
	s.protos[src] = p
	return p, nil
}

// argString is an argument as go-redis sends it.
func argString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case int32:
		return strconv.FormatInt(int64(v), 10)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		if v {
			return "1"
		}
		return "0"
	case fmt.Stringer:
		return v.String()
	}
	return fmt.Sprint(a)
}

// reply converts a script's Lua value to what go-redis returns for it: a
// number is an integer (truncated), a table an array up to its first nil
// (or an error or status reply), true 1, false and nil nil.
func reply(v lua.LValue, top bool) (any, error) {
	switch x := v.(type) {
	case lua.LNumber:
		return int64(x), nil
	case lua.LString:
		return string(x), nil
	case lua.LBool:
		if x {
			return int64(1), nil
		}
		return nil, nilReply(top)
	case *lua.LTable:
		if e := x.RawGetString("err"); e != lua.LNil {
			return nil, fmt.Errorf("%s", lua.LVAsString(e))
		}
		if ok := x.RawGetString("ok"); ok != lua.LNil {
			return lua.LVAsString(ok), nil
		}
		var out []any
		for i := 1; ; i++ {
			e := x.RawGetInt(i)
			if e == lua.LNil {
				break
			}
			r, err := reply(e, false) // a false in an array is a nil element
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		if out == nil {
			out = []any{}
		}
		return out, nil
	}
	return nil, nilReply(top)
}

// nilReply is go-redis's redis.Nil for a script's nil reply.
func nilReply(top bool) error {
	if top {
		return redis.Nil
	}
	return nil
}

// hash is a Redis hash that keeps its fields in the order they were
// added, as a small one does (a listpack): HGETALL answers in that order.
type hash struct {
	fields []string
	values map[string]string
}

func (h *hash) get(f string) (string, bool) {
	if h == nil {
		return "", false
	}
	v, ok := h.values[f]
	return v, ok
}

// set sets f and reports whether it is new.
func (h *hash) set(f, v string) bool {
	_, had := h.values[f]
	if !had {
		h.fields = append(h.fields, f)
	}
	h.values[f] = v
	return !had
}

func (h *hash) del(f string) bool {
	if _, ok := h.values[f]; !ok {
		return false
	}
	delete(h.values, f)
	h.fields = slices.DeleteFunc(h.fields, func(x string) bool { return x == f })
	return true
}

// hashOf returns key's hash, made when make is true.
func (s *Store) hashOf(key string, make bool) *hash {
	h := s.hashes[key]
	if h == nil && make {
		h = &hash{values: map[string]string{}}
		s.hashes[key] = h
	}
	return h
}

// call is redis.call: the commands the ledger's scripts use.
func (s *Store) call(L *lua.LState) int {
	n := L.GetTop()
	args := make([]string, n)
	for i := 1; i <= n; i++ {
		args[i-1] = lua.LVAsString(L.Get(i))
	}
	if n == 0 {
		L.RaiseError("redis.call with no command")
	}
	cmd := strings.ToUpper(args[0])
	args = args[1:]
	need := func(k int) {
		if len(args) < k {
			L.RaiseError("ERR wrong number of arguments for '%s' command", strings.ToLower(cmd))
		}
	}
	switch cmd {
	case "HGET":
		need(2)
		if v, ok := s.hashOf(args[0], false).get(args[1]); ok {
			L.Push(lua.LString(v))
		} else {
			L.Push(lua.LFalse)
		}
	case "HMGET":
		need(2)
		t := L.NewTable()
		for _, f := range args[1:] {
			if v, ok := s.hashOf(args[0], false).get(f); ok {
				t.Append(lua.LString(v))
			} else {
				t.Append(lua.LFalse)
			}
		}
		L.Push(t)
	case "HGETALL":
		need(1)
		t := L.NewTable()
		if h := s.hashOf(args[0], false); h != nil {
			for _, f := range h.fields {
				t.Append(lua.LString(f))
				t.Append(lua.LString(h.values[f]))
			}
		}
		L.Push(t)
	case "HSET":
		need(3)
		if len(args)%2 != 1 {
			L.RaiseError("ERR wrong number of arguments for 'hset' command")
		}
		h := s.hashOf(args[0], true)
		added := 0
		for i := 1; i+1 < len(args); i += 2 {
			if h.set(args[i], args[i+1]) {
				added++
			}
		}
		L.Push(lua.LNumber(added))
	case "HDEL":
		need(2)
		h := s.hashOf(args[0], false)
		removed := 0
		for _, f := range args[1:] {
			if h != nil && h.del(f) {
				removed++
			}
		}
		if h != nil && len(h.fields) == 0 {
			delete(s.hashes, args[0])
		}
		L.Push(lua.LNumber(removed))
	case "HINCRBY":
		need(3)
		by, err := strconv.ParseInt(args[2], 10, 64)
		if err != nil {
			L.RaiseError("ERR value is not an integer or out of range")
		}
		h := s.hashOf(args[0], true)
		cur := int64(0)
		if v, ok := h.get(args[1]); ok {
			if cur, err = strconv.ParseInt(v, 10, 64); err != nil {
				L.RaiseError("ERR hash value is not an integer")
			}
		}
		cur += by
		h.set(args[1], strconv.FormatInt(cur, 10))
		L.Push(lua.LNumber(cur))
	case "ZADD":
		need(3)
		z := s.zsets[args[0]]
		if z == nil {
			z = map[string]float64{}
			s.zsets[args[0]] = z
		}
		added := 0
		for i := 1; i+1 < len(args); i += 2 {
			score, err := strconv.ParseFloat(args[i], 64)
			if err != nil || math.IsNaN(score) {
				L.RaiseError("ERR value is not a valid float")
			}
			if _, ok := z[args[i+1]]; !ok {
				added++
			}
			z[args[i+1]] = score
		}
		L.Push(lua.LNumber(added))
	case "ZREM":
		need(2)
		z := s.zsets[args[0]]
		removed := 0
		for _, m := range args[1:] {
			if _, ok := z[m]; ok {
				delete(z, m)
				removed++
			}
		}
		if len(z) == 0 {
			delete(s.zsets, args[0])
		}
		L.Push(lua.LNumber(removed))
	case "ZRANGEBYLEX":
		need(3)
		L.Push(s.rangeByLex(L, args))
	case "UNLINK", "DEL":
		need(1)
		n := 0
		for _, k := range args {
			if _, ok := s.hashes[k]; ok {
				delete(s.hashes, k)
				n++
			}
			if _, ok := s.zsets[k]; ok {
				delete(s.zsets, k)
				n++
			}
		}
		L.Push(lua.LNumber(n))
	default:
		L.RaiseError("memledger: the ledger's scripts do not call %s", cmd)
	}
	return 1
}

// rangeByLex is ZRANGEBYLEX key min max [LIMIT offset count] over members
// that all have one score (the ledger's lows do), in byte order.
func (s *Store) rangeByLex(L *lua.LState, args []string) *lua.LTable {
	z := s.zsets[args[0]]
	members := make([]string, 0, len(z))
	for m := range z {
		members = append(members, m)
	}
	slices.Sort(members)
	inRange := func(m, bound string, lower bool) bool {
		switch {
		case bound == "-":
			return lower
		case bound == "+":
			return !lower
		case strings.HasPrefix(bound, "["):
			if lower {
				return m >= bound[1:]
			}
			return m <= bound[1:]
		case strings.HasPrefix(bound, "("):
			if lower {
				return m > bound[1:]
			}
			return m < bound[1:]
		}
		L.RaiseError("ERR min or max not valid string range item")
		return false
	}
	offset, count := 0, -1
	if len(args) >= 6 && strings.EqualFold(args[3], "LIMIT") {
		offset, _ = strconv.Atoi(args[4])
		count, _ = strconv.Atoi(args[5])
	}
	t := L.NewTable()
	for _, m := range members {
		if !inRange(m, args[1], true) || !inRange(m, args[2], false) {
			continue
		}
		if offset > 0 {
			offset--
			continue
		}
		if count == 0 {
			break
		}
		t.Append(lua.LString(m))
		if count > 0 {
			count--
		}
	}
	return t
}
