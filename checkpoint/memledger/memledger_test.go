package memledger_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/checkpoint/memledger"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"
)

// tee runs every script on a real redis-server and on the memory store,
// and records each call whose replies differ.
type tee struct {
	redis checkpoint.Evaluator
	mem   *memledger.Store
	mu    sync.Mutex
	diffs []string
}

func (e *tee) Eval(ctx context.Context, src string, keys []string, args ...any) (any, error) {
	rv, rerr := e.redis.Eval(ctx, src, keys, args...)
	mv, merr := e.mem.Eval(ctx, src, keys, args...)
	same := (rerr == nil) == (merr == nil) && reflect.DeepEqual(rv, mv)
	if errors.Is(rerr, redis.Nil) != errors.Is(merr, redis.Nil) {
		same = false
	}
	if !same {
		first, _, _ := strings.Cut(strings.TrimSpace(src[strings.LastIndex(src, "\n-- ")+1:]), "\n")
		e.mu.Lock()
		e.diffs = append(e.diffs, fmt.Sprintf("script %q args %v: Redis %v (%v), memory %v (%v)", first, args, rv, rerr, mv, merr))
		e.mu.Unlock()
	}
	return rv, rerr
}

// redisEval runs scripts on c, as checkpoint.NewRedis does.
type redisEval struct{ c redis.UniversalClient }

func (r redisEval) Eval(ctx context.Context, src string, keys []string, args ...any) (any, error) {
	return redis.NewScript(src).Run(ctx, r.c, keys, args...).Result()
}

// The memory ledger answers every call as the Redis one does: random
// sequences of opens (by new and old mappings, provisional or not,
// aligned or not, with rewound and grown shards), ready calls, writes of
// marks (with undone positions, releases, late ones), realignments,
// reads and a lost ledger, run on both, every reply compared.
func TestTheMemoryLedgerIsTheRedisOne(t *testing.T) {
	// Hashes stay listpacks, which keep their fields in the order they were
	// added, as the memory store does (a large hash's order is Redis's own).
	srv := redistest.Start(t, "--hash-max-listpack-entries", "1000000", "--hash-max-listpack-value", "1000000")
	c := srv.Client()
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		group := fmt.Sprintf("g%d", n)
		e := &tee{redis: redisEval{c}, mem: memledger.New()}
		l := checkpoint.NewOn(e, group)
		ctx := context.Background()
		shards := rapid.IntRange(1, 4).Draw(rt, "shards")
		aligned := rapid.Bool().Draw(rt, "aligned")
		token := int64(100)
		pos := func(rt *rapid.T, label string) transport.Position {
			return transport.Position{Hi: rapid.Uint64Range(0, 3).Draw(rt, label+".hi"), Lo: rapid.Uint64Range(0, 40).Draw(rt, label+".lo")}
		}
		positions := func(rt *rapid.T, n int) []transport.Position {
			out := make([]transport.Position, n)
			for i := range out {
				out[i] = pos(rt, fmt.Sprint("p", i))
			}
			return out
		}
		epoch := int64(0)
		rt.Repeat(map[string]func(*rapid.T){
			"open": func(rt *rapid.T) {
				r := rapid.IntRange(1, 4).Draw(rt, "r")
				token += rapid.Int64Range(-3, 5).Draw(rt, "dtoken")
				req := checkpoint.OpenRequest{Replicas: r, Index: rapid.IntRange(0, r-1).Draw(rt, "k"), Token: token,
					Origin: positions(rt, shards+rapid.IntRange(0, 1).Draw(rt, "grow")), Aligned: aligned,
					Provisional: rapid.Bool().Draw(rt, "provisional"), Seen: rapid.Int64Range(0, epoch+1).Draw(rt, "seen")}
				req.Ends = positions(rt, len(req.Origin))
				if rapid.IntRange(0, 5).Draw(rt, "rewind") == 0 {
					req.Rewound = []int{rapid.IntRange(0, len(req.Origin)-1).Draw(rt, "rewound")}
				}
				if req.Seen > 0 {
					req.SeenStart = positions(rt, len(req.Origin))
				}
				if st, err := l.Open(ctx, req); err == nil && st.Current != nil {
					epoch = st.Current.N
				}
			},
			"ready": func(rt *rapid.T) {
				r := rapid.IntRange(1, 4).Draw(rt, "r")
				_, _, _ = l.Ready(ctx, checkpoint.ReadyRequest{Epoch: rapid.Int64Range(0, epoch+1).Draw(rt, "epoch"), Token: token - rapid.Int64Range(0, 3).Draw(rt, "older"),
					Index: rapid.IntRange(0, r-1).Draw(rt, "k"), Replicas: r})
			},
			"write": func(rt *rapid.T) {
				r := rapid.IntRange(1, 4).Draw(rt, "r")
				w := checkpoint.WriteRequest{Epoch: rapid.Int64Range(0, epoch+1).Draw(rt, "epoch"), Token: token - rapid.Int64Range(0, 3).Draw(rt, "older"),
					Index: rapid.IntRange(0, r-1).Draw(rt, "k"), Replicas: r * rapid.IntRange(0, 1).Draw(rt, "checked"),
					Release: rapid.Bool().Draw(rt, "release"), Marks: map[int]checkpoint.Mark{}}
				for s := range rapid.IntRange(0, shards).Draw(rt, "marks") {
					low := pos(rt, "low")
					m := checkpoint.Mark{Low: low, High: low}
					if rapid.Bool().Draw(rt, "beyond") {
						m.High = transport.Position{Hi: low.Hi, Lo: low.Lo + rapid.Uint64Range(1, 9).Draw(rt, "span")}
						for p := low.Lo + 1; p < m.High.Lo; p++ {
							if rapid.IntRange(0, 2).Draw(rt, "undone") == 0 {
								m.Undone = append(m.Undone, transport.Position{Hi: low.Hi, Lo: p})
							}
						}
					}
					w.Marks[s] = m
				}
				_ = l.Write(ctx, w)
			},
			"realign": func(rt *rapid.T) {
				r := rapid.IntRange(1, 4).Draw(rt, "r")
				_ = l.Realign(ctx, checkpoint.RealignRequest{Epoch: rapid.Int64Range(0, epoch+1).Draw(rt, "epoch"), Token: token,
					Replicas: r, Shard: rapid.IntRange(0, shards-1).Draw(rt, "shard"), Position: pos(rt, "at"), Key: "k",
					Late: rapid.Bool().Draw(rt, "late"), Ends: positions(rt, shards)})
			},
			"read": func(rt *rapid.T) {
				_, _ = l.Read(ctx)
				_, _ = l.ReadLow(ctx)
			},
			"ledger lost": func(rt *rapid.T) {
				if err := c.Del(ctx, checkpoint.Key(group)).Err(); err != nil {
					rt.Fatal(err)
				}
				e.mem.Delete(checkpoint.Key(group))
			},
			"": func(rt *rapid.T) {
				e.mu.Lock()
				defer e.mu.Unlock()
				if len(e.diffs) > 0 {
					rt.Fatalf("the memory ledger answered otherwise than Redis:\n%s", strings.Join(e.diffs, "\n"))
				}
			},
		})
	})
}
