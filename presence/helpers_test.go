package presence_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nandi-go/nandi/presence"
	"github.com/redis/go-redis/v9"
)

func redisZ(expires time.Time, id string) redis.Z {
	return redis.Z{Score: float64(expires.UnixMilli()), Member: id}
}

func usedMemory(tb testing.TB, c *redis.Client) int64 {
	tb.Helper()
	info, err := c.InfoMap(context.Background(), "memory").Result()
	if err != nil {
		tb.Fatal(err)
	}
	n, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
	if err != nil {
		tb.Fatalf("used_memory: %v", err)
	}
	return n
}

// wireBytes is the RESP size of one Write of r: the four commands it
// pipelines and their replies (+OK, two integers, :1).
func wireBytes(r *presence.Record) int {
	b, _ := json.Marshal(r)
	set, key := presence.SetKey("mail-sender"), presence.RecordKey("mail-sender", r.Worker)
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	cmds := [][]string{
		{"set", key, string(b), "px", "30000"},
		{"zadd", set, now, r.Worker},
		{"zremrangebyscore", set, "-inf", "(" + now},
		{"pexpire", set, "30000"},
	}
	n := len("+OK\r\n") + 3*len(":1\r\n")
	for _, cmd := range cmds {
		n += len("*" + strconv.Itoa(len(cmd)) + "\r\n")
		for _, a := range cmd {
			n += len("$"+strconv.Itoa(len(a))+"\r\n") + len(a) + 2
		}
	}
	return n
}

// roundTrips counts the round trips (commands or pipelines) made with a
// context from its ctx.
type roundTrips struct{ n atomic.Int64 }

type counted struct{}

func (h *roundTrips) ctx(parent context.Context) context.Context {
	return context.WithValue(parent, counted{}, true)
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(counted{}) != nil {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(counted{}) != nil {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}
