package partition

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed register.lua
var registerSource string

var registerScript = redis.NewScript(registerSource)

// reply is what one call of the script answered. Times are server
// microseconds.
type reply struct {
	registered bool   // false: outside the window
	interval   int64  // the interval registered in (registered), else the current one
	offset     int64  // offset of now in the current interval
	now        int64  // server time, clamped monotonic per group
	gen        string // store generation
	index      int    // 0-based index in interval (registered)
	prevCount  int    // count of interval-1, final
}

// call is one registration call's arguments.
type call struct {
	token string // the registration's token: a retry carries the same one
	nonce string // a random value, kept as the group's nonce if it has none
	// aimed is the interval the registration was aimed at; probe (-1): a
	// probe of the server's clock, answered and never counted. A request
	// that arrives after aimed+1 (delayed in the network, or a retry of a
	// client) is not counted: the token lookup, which covers retries
	// within the next interval, cannot see further back. 0 (unknown) is
	// counted wherever it lands: the runner never sends it.
	aimed int64
	// want is the index this worker got in its last registration (-1:
	// none), and prevToken that registration's token: the script keeps
	// the index when it was got in the interval before and is still free.
	want      int
	prevToken string
}

// probe is call.aimed for a call that only reads the server's clock.
const probe = -1

// store is what the lease needs of Redis: one registration call with the
// script's semantics. The real one is redisStore; tests use an in-memory one.
type store interface {
	register(ctx context.Context, c call) (reply, error)
}

type redisStore struct {
	client   redis.UniversalClient
	key      string
	settings []any // interval_us, gap_ppm
	wait     int
	waitTime time.Duration
	name     string
	interval time.Duration
	gap      float64
}

func (s *redisStore) register(ctx context.Context, c call) (reply, error) {
	args := []any{s.settings[0], s.settings[1], c.token, c.nonce, c.aimed, c.want, c.prevToken}
	var v any
	var err error
	if s.wait > 0 {
		v, err = s.registerAndWait(ctx, args)
	} else {
		v, err = registerScript.Run(ctx, s.client, []string{s.key}, args...).Result()
	}
	if err != nil {
		if c, ok := s.client.(*redis.ClusterClient); ok && !errors.Is(err, context.Canceled) {
			// go-redis keeps a cluster's slot map until a MOVED reply or
			// its reload interval (60s since v9.22): after a failover it
			// would keep dialing the dead master (redis/go-redis#3979).
			// Have it reload now (not when the lease is stopping);
			// reloads are coalesced, at most one per 200ms.
			c.ReloadState(ctx)
		}
		return reply{}, err
	}
	return s.parse(v)
}

// registerAndWait sends the script and WAIT on one connection, so WAIT
// covers the script's writes.
func (s *redisStore) registerAndWait(ctx context.Context, args []any) (any, error) {
	var node *redis.Client
	switch c := s.client.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, s.key)
		if err != nil {
			return nil, err
		}
		node = n
	default:
		return nil, fmt.Errorf("%w: WaitReplicas needs a *redis.Client or *redis.ClusterClient, got %T", ErrInvalidOptions, s.client)
	}
	for loaded := false; ; loaded = true {
		pipe := node.Pipeline()
		eval := registerScript.EvalSha(ctx, pipe, []string{s.key}, args...)
		// Whole milliseconds, rounded up: WAIT n 0 would wait forever.
		wait := pipe.Do(ctx, "WAIT", s.wait, max(1, (s.waitTime+time.Millisecond-1).Milliseconds()))
		_, _ = pipe.Exec(ctx)
		if err := eval.Err(); err != nil {
			if !loaded && redis.HasErrorPrefix(err, "NOSCRIPT") {
				if err := registerScript.Load(ctx, node).Err(); err != nil {
					return nil, err
				}
				continue
			}
			return nil, err
		}
		acked, err := wait.Int()
		if err != nil {
			return nil, fmt.Errorf("partition: WAIT after registration: %w", err)
		}
		if acked < s.wait {
			return nil, fmt.Errorf("partition: registration acknowledged by %d of %d replicas within %v", acked, s.wait, s.waitTime)
		}
		return eval.Val(), nil
	}
}

func (s *redisStore) parse(v any) (reply, error) {
	a, ok := v.([]any)
	if !ok || len(a) == 0 {
		return reply{}, fmt.Errorf("partition: unexpected script reply %v", v)
	}
	status, _ := a[0].(string)
	bad := func() (reply, error) { return reply{}, fmt.Errorf("partition: unexpected script reply %v", v) }
	switch status {
	case "settings":
		if len(a) != 3 {
			return bad()
		}
		iv, err1 := toInt(a[1])
		gp, err2 := toInt(a[2])
		if err1 != nil || err2 != nil {
			return bad()
		}
		return reply{}, &SettingsError{
			Group:          s.name,
			GroupInterval:  time.Duration(iv) * time.Microsecond,
			GroupGap:       float64(gp) / 1e6,
			WorkerInterval: s.interval,
			WorkerGap:      s.gap,
		}
	case "time", "ok":
		want := 6
		if status == "ok" {
			want = 7
		}
		if len(a) != want {
			return bad()
		}
		var r reply
		var errs [6]error
		r.interval, errs[0] = toInt(a[1])
		r.offset, errs[1] = toInt(a[2])
		r.now, errs[2] = toInt(a[3])
		r.gen, _ = a[4].(string)
		if status == "ok" {
			var idx, cnt int64
			idx, errs[3] = toInt(a[5])
			cnt, errs[4] = toInt(a[6])
			r.registered, r.index, r.prevCount = true, int(idx), int(cnt)
		} else {
			var cnt int64
			cnt, errs[5] = toInt(a[5])
			r.prevCount = int(cnt)
		}
		if err := errors.Join(errs[:]...); err != nil || r.gen == "" {
			return bad()
		}
		return r, nil
	}
	return bad()
}

func toInt(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, fmt.Errorf("not an integer: %v", v)
}
