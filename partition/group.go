package partition

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoGroup is returned by ReadGroup for a group with no lease state: no
// worker has registered in the last 10 intervals (or another database).
var ErrNoGroup = errors.New("partition: no such group")

// Group is a group's lease state as the store holds it, for tools (nandi
// status, watch and web): read-only, and nothing of the protocol reads it.
type Group struct {
	Name       string        // the group's name
	Interval   time.Duration // the group's settings, as its hash records them
	Gap        float64       // (Options.Interval and Gap)
	ServerTime time.Time     // the server's clock, clamped as the script clamps it
	Current    int64         // the interval ServerTime is in
	Offset     time.Duration // of ServerTime in Current
	Generation string        // the store generation (nonce, run_id, master_replid)
	Counts     []Count       // the intervals the hash keeps, newest first
}

// Count is one interval's registrations.
type Count struct {
	Interval int64 // N: the interval that holds server time N*Interval
	Count    int
	Closed   bool // nobody can register in it any more: Count is final
}

// readScript reads the group's hash, the server's clock and its
// generation in one call, on the master.
var readScript = redis.NewScript(`
local all = redis.call('HGETALL', KEYS[1])
local t = redis.call('TIME')
local gen = ''
local ok, info = pcall(redis.call, 'INFO', 'server')
if ok and type(info) == 'string' then gen = string.match(info, 'run_id:(%w+)') or '' end
local rep = ''
ok, info = pcall(redis.call, 'INFO', 'replication')
if ok and type(info) == 'string' then rep = string.match(info, 'master_replid:(%w+)') or '' end
return {all, t[1] * 1000000 + t[2], gen, rep}`)

// ReadGroup reads group name's lease state from client, without changing
// it: one script on the master. A hash whose settings no lease could have
// written (an interval below MinInterval, a gap outside (0, MaxGap]) is an
// error that names the field.
func ReadGroup(ctx context.Context, client redis.Scripter, name string) (*Group, error) {
	res, err := readScript.Run(ctx, client, []string{Key(name)}).Slice()
	if err != nil {
		return nil, fmt.Errorf("partition: reading group %q: %w", name, err)
	}
	if len(res) != 4 {
		return nil, fmt.Errorf("partition: reading group %q: unexpected reply %v", name, res)
	}
	flat, _ := res[0].([]any)
	now, _ := res[1].(int64)
	var gens []string
	for _, x := range res[2:] {
		if s, _ := x.(string); s != "" {
			gens = append(gens, s)
		}
	}
	return parseGroup(name, flat, now, gens)
}

// parseGroup reads the group's hash (HGETALL's flat reply), the server's
// time in microseconds and the generation's parts from the server.
func parseGroup(name string, flat []any, now int64, gens []string) (*Group, error) {
	all := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		f, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		all[f] = v
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("%w: no group %q: its key %s does not exist (no worker registered in the last 10 intervals, or another database)", ErrNoGroup, name, Key(name))
	}
	unreadable := func(field string) error {
		return fmt.Errorf("partition: group %q: unreadable settings in %s: field %q is %q, which no lease writes", name, Key(name), field, all[field])
	}
	iv, err := strconv.ParseInt(all["interval_us"], 10, 64)
	if err != nil || iv < MinInterval.Microseconds() || iv > math.MaxInt64/1000 {
		return nil, unreadable("interval_us")
	}
	ppm, err := strconv.ParseInt(all["gap_ppm"], 10, 64)
	if err != nil || ppm <= 0 || ppm > gapPPM(MaxGap) {
		return nil, unreadable("gap_ppm")
	}
	T := max(now, 0)
	if tmax, err := strconv.ParseInt(all["tmax_us"], 10, 64); err == nil && tmax > T {
		T = tmax
	}
	g := &Group{Name: name, Interval: time.Duration(iv) * time.Microsecond, Gap: float64(ppm) / 1e6,
		ServerTime: time.UnixMicro(T).UTC(), Current: T / iv, Offset: time.Duration(T%iv) * time.Microsecond}
	g.Generation = all["nonce"]
	for _, x := range gens {
		g.Generation += ":" + x
	}
	for f, v := range all {
		if n, ok := strings.CutPrefix(f, "c:"); ok {
			m, err1 := strconv.ParseInt(n, 10, 64)
			k, err2 := strconv.Atoi(v)
			if err1 == nil && err2 == nil {
				g.Counts = append(g.Counts, Count{Interval: m, Count: k, Closed: m < g.Current})
			}
		}
	}
	sort.Slice(g.Counts, func(i, j int) bool { return g.Counts[i].Interval > g.Counts[j].Interval })
	return g, nil
}
