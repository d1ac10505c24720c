package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/deadletter"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
)

// nandi groups lists every group on a Redis, whatever it has left there
// (a lease, checkpoints, dead letters), and status and groups count a
// Redis stream's entries behind the group: a paused group over "orders"
// with 50 entries appended after its checkpoints is 50 behind.
func TestGroupsAndTheirLagInEntries(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client()
	ctx, cancel := context.WithCancel(context.Background())
	url := "redis://" + s.Addr()
	src, err := redisstream.New(c, "orders", redisstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := src.Producer(redisstream.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(n int) {
		for range n {
			if err := p.Publish(ctx, "7", []byte("x"), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(100)
	var handled atomic.Int64
	lease, err := partition.New(c, partition.Options{Name: "orders", Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := consumer.New(lease, src, func(context.Context, *transport.Message) error { handled.Add(1); return nil },
		consumer.Options{WorkerID: "w1", CheckpointInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{})
	go func() { defer close(ran); _ = cons.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })
	redistest.WaitFor(t, 20*time.Second, "100 tasks handled", func() bool { return handled.Load() == 100 })
	if code, out, errOut := nandi(t, ctx, "pause", "-redis", url, "-group", "orders"); code != 0 {
		t.Fatalf("pause: exit %d %s%s", code, out, errOut)
	}
	redistest.WaitFor(t, 10*time.Second, "the worker to pause", func() bool { return cons.Stats().Paused })
	publish(50)
	// A group with only dead letters, and keys of no group.
	dead := deadletter.RedisStream(c, deadletter.Stream("mail"), deadletter.Options{})
	if err := dead(ctx, &transport.Message{Key: "1"}, errors.New("550")); err != nil {
		t.Fatal(err)
	}
	c.Set(ctx, "{cache}:entry", "x", 0)
	c.Set(ctx, "plain", "x", 0)

	var st Status
	var last string
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, out, _ := nandi(t, ctx, "status", "-redis", url, "-group", "orders", "-json")
		st, last = Status{}, out
		if code == 0 && json.Unmarshal([]byte(out), &st) == nil && len(st.Lag) == 1 && st.Lag[0].Entries != nil && *st.Lag[0].Entries == 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status did not count 50 entries behind in 20s:\n%s", last)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if l := st.Lag[0]; l.Source != "orders" || l.AtLeast || l.AgeSeconds == nil {
		t.Errorf("lag %+v; want 50 entries of orders, and an age", l)
	}
	code, out, errOut := nandi(t, ctx, "status", "-redis", url, "-group", "orders")
	if code != 0 || !strings.Contains(out, "BEHIND (ENTRIES, AGE)") || !strings.Contains(out, "orders  50 (") {
		t.Errorf("status: exit %d, want the lag table with 50 entries behind in orders\n%s%s", code, out, errOut)
	}

	// A reset's dry run while the group runs: the Redis stream's entries it
	// would redo, counted, the streams named by the running worker.
	code, out, errOut = nandi(t, ctx, "checkpoint", "reset", "-redis", url, "-group", "orders", "-to", "start", "-dry-run")
	if code != 0 || !strings.Contains(out, "shard 0: would redo 100 entries of orders (from 0 to ") || !strings.Contains(out, "the group is running") {
		t.Errorf("reset -dry-run of a running group over a Redis stream: exit %d; want the 100 entries it would redo, and that it runs\n%s%s", code, out, errOut)
	}

	code, out, errOut = nandi(t, ctx, "groups", "-redis", url)
	t.Logf("nandi groups:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[1], "mail ") || !strings.HasPrefix(lines[2], "orders ") {
		t.Fatalf("groups: exit %d; want a header, mail and orders\n%s%s", code, out, errOut)
	}
	if f := strings.Fields(lines[2]); len(f) < 8 || f[1] != "1" || f[2] != "1" || f[3] != "50" || f[len(f)-2] != "yes" || f[len(f)-1] != "0" {
		t.Errorf("orders' line %q: want 1 worker, 1 replica, 50 behind, paused, no dead letters", lines[2])
	}
	if f := strings.Fields(lines[1]); f[1] != "0" || f[len(f)-1] != "1" {
		t.Errorf("mail's line %q: want no worker and 1 dead letter", lines[1])
	}
	_, doc := docCommand(t, "groups") // the sample in docs/cli.md
	sameShape(t, "nandi groups", doc, out)

	code, out, _ = nandi(t, ctx, "groups", "-redis", url, "-json")
	var gs []GroupSummary
	if code != 0 || json.Unmarshal([]byte(out), &gs) != nil || len(gs) != 2 || largest(gs[1].Lag) == nil || *largest(gs[1].Lag).Entries != 50 || gs[1].Paused == nil || gs[0].Dead != 1 {
		t.Errorf("groups -json: exit %d\n%s", code, out)
	}
	assertSnakeCase(t, "groups -json", out)
}
