package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
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

// Tasks a handler gives up on land in the group's dead-letter stream with
// why and where; nandi dead list shows them; once the handler is fixed,
// nandi dead replay puts them back on the source stream, the group
// handles them, and the dead-letter stream is empty.
func TestDeadLettersListedAndReplayed(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client()
	ctx, cancel := context.WithCancel(context.Background())
	src, err := redisstream.New(c, "orders", redisstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := src.Producer(redisstream.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		key := "good"
		if i%5 == 0 {
			key = "bad"
		}
		if err := p.Publish(ctx, key, []byte{byte('a' + i)}, map[string]string{"tenant": "acme"}); err != nil {
			t.Fatal(err)
		}
	}
	var fixed atomic.Bool
	var mu sync.Mutex
	var done []string
	h := func(_ context.Context, m *transport.Message) error {
		if m.Key == "bad" && !fixed.Load() {
			return errors.New("card declined")
		}
		mu.Lock()
		done = append(done, m.Key+"/"+string(m.Payload))
		mu.Unlock()
		return nil
	}
	lease, err := partition.New(c, partition.Options{Name: "orders", Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := consumer.New(lease, src, h, consumer.Options{MaxAttempts: 2, RetryMin: time.Millisecond, WorkerID: "w1",
		DeadLetter: deadletter.RedisStream(c, deadletter.Stream("orders"), deadletter.Options{MaxLen: 10_000})})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{})
	go func() { defer close(ran); _ = cons.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })
	redistest.WaitFor(t, 20*time.Second, "2 dead letters and 8 tasks done", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) == 8 && c.XLen(ctx, deadletter.Stream("orders")).Val() == 2
	})
	url := "redis://" + s.Addr()

	code, out, errOut := nandi(t, ctx, "dead", "list", "-redis", url, "-group", "orders")
	if code != 0 || strings.Count(out, "card declined") != 2 || !strings.Contains(out, "0 of 1, token") {
		t.Fatalf("dead list: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("nandi dead list:\n%s", out)
	_, doc := docCommand(t, "dead list") // the sample in docs/cli.md
	sameShape(t, "nandi dead list", doc, out)
	code, out, _ = nandi(t, ctx, "dead", "list", "-redis", url, "-group", "orders", "-json")
	var ls []deadletter.Letter
	if code != 0 || json.Unmarshal([]byte(out), &ls) != nil || len(ls) != 2 {
		t.Fatalf("dead list -json: exit %d\n%s", code, out)
	}
	for _, l := range ls {
		if l.Key != "bad" || l.Attempts != 2 || l.Worker != "w1" || l.Token == 0 || l.Replicas != 1 || l.Headers["tenant"] != "acme" || l.At.IsZero() {
			t.Errorf("letter %+v; want key bad, 2 attempts, worker w1, the term, the headers, the time", l)
		}
	}

	fixed.Store(true)
	code, out, errOut = nandi(t, ctx, "dead", "replay", "-redis", url, "-group", "orders", "-to", "orders", "-all")
	if code != 0 || !strings.Contains(out, "replayed 2 of 2") {
		t.Fatalf("dead replay: exit %d\n%s%s", code, out, errOut)
	}
	_, doc = docCommand(t, "dead replay")
	sameShape(t, "nandi dead replay", doc, out)
	redistest.WaitFor(t, 20*time.Second, "the replayed tasks", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) == 10
	})
	mu.Lock()
	if got := strings.Join(done[8:], " "); got != "bad/a bad/f" {
		t.Errorf("replayed tasks done as %q; want bad/a bad/f, in order", got)
	}
	mu.Unlock()
	if n := c.XLen(ctx, deadletter.Stream("orders")).Val(); n != 0 {
		t.Errorf("%d letters left after the replay; want none", n)
	}
	if code, _, errOut := nandi(t, ctx, "dead", "replay", "-redis", url, "-group", "orders", "-to", "orders"); code != 2 || !strings.Contains(errOut, "-id or -all") {
		t.Errorf("replay without -id or -all: exit %d, %q", code, errOut)
	}
}
