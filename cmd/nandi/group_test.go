package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport/memory"
	"github.com/redis/go-redis/v9"
)

// testGroup runs consumers of one group over a memory log on a real
// redis-server; they stop (and are waited for) when the test ends.
type testGroup struct {
	t       *testing.T
	client  *redis.Client
	name    string
	iv      time.Duration
	log     *memory.Log
	handler consumer.Handler
	opts    consumer.Options

	ctx    context.Context
	wg     sync.WaitGroup
	mu     sync.Mutex
	leases []*partition.Lease
	cs     []*consumer.Consumer
}

func newTestGroup(t *testing.T, client *redis.Client, name string, iv time.Duration, log *memory.Log,
	h consumer.Handler, opts consumer.Options) *testGroup {
	g := &testGroup{t: t, client: client, name: name, iv: iv, log: log, handler: h, opts: opts}
	ctx, cancel := context.WithCancel(context.Background())
	g.ctx = ctx
	t.Cleanup(func() { cancel(); g.wg.Wait() })
	return g
}

// start runs one more worker, whose presence record carries id.
func (g *testGroup) start(id string) *partition.Lease {
	g.t.Helper()
	l, err := partition.New(g.client, partition.Options{Name: g.name, Interval: g.iv})
	if err != nil {
		g.t.Fatal(err)
	}
	opts := g.opts
	opts.WorkerID = id
	c, err := consumer.New(l, g.log.Source(), g.handler, opts)
	if err != nil {
		g.t.Fatal(err)
	}
	g.mu.Lock()
	g.leases = append(g.leases, l)
	g.cs = append(g.cs, c)
	g.mu.Unlock()
	g.wg.Go(func() { _ = c.Run(g.ctx) })
	return l
}

// consumers returns the workers' consumers.
func (g *testGroup) consumers() []*consumer.Consumer {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*consumer.Consumer(nil), g.cs...)
}

// holding reports whether every worker holds a share of n.
func (g *testGroup) holding(n int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, l := range g.leases {
		if a, ok := l.Current(); !ok || a.Replicas != n {
			return false
		}
	}
	return len(g.leases) > 0
}
