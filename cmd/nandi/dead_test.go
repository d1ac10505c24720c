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
	"github.com/redis/go-redis/v9"
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

	for _, l := range ls {
		if l.System != "redis" || l.Source != "orders" {
			t.Errorf("letter %s came from %s %q; want redis orders", l.ID, l.System, l.Source)
		}
	}
	assertSnakeCase(t, "dead list -json", out)

	// One letter whole.
	code, out, errOut = nandi(t, ctx, "dead", "show", "-redis", url, "-group", "orders", ls[0].ID)
	t.Logf("nandi dead show:\n%s", out)
	for _, want := range []string{"key:", "bad", "error:", "card declined", "attempts:", "2", "worker:", "w1", "term:", "index 0 of 1, token",
		"source:", "redis orders, shard 0 at", "header tenant:", "acme", "payload:", "1 bytes, as text"} {
		if !strings.Contains(out, want) {
			t.Errorf("dead show lacks %q: exit %d\n%s%s", want, code, out, errOut)
		}
	}
	if !strings.HasSuffix(out, "\na\n") {
		t.Errorf("dead show does not end with the payload, a, on its own line:\n%s", out)
	}
	_, doc = docCommand(t, "dead show")
	sameShape(t, "nandi dead show", doc, out)
	if code, _, errOut := nandi(t, ctx, "dead", "show", "-redis", url, "-group", "orders", "0-1"); code != 1 || !strings.Contains(errOut, "no letter 0-1") {
		t.Errorf("dead show of no letter: exit %d, %q", code, errOut)
	}

	// A typo in -to is refused, and nothing is lost.
	fixed.Store(true)
	code, _, errOut = nandi(t, ctx, "dead", "replay", "-redis", url, "-group", "orders", "-to", "ordrs", "-all")
	if code != 1 || !strings.Contains(errOut, "no stream ordrs") || !strings.Contains(errOut, "-create") {
		t.Errorf("replay -to a stream that does not exist: exit %d, %q; want 1, naming it and -create", code, errOut)
	}
	if n := c.XLen(ctx, deadletter.Stream("orders")).Val(); n != 2 || c.Exists(ctx, "ordrs").Val() != 0 {
		t.Fatalf("after a refused replay: %d letters, stream ordrs exists %d; want the 2 letters kept and no stream made", n, c.Exists(ctx, "ordrs").Val())
	}

	// With no -to, each letter goes back to the stream it came from.
	code, out, errOut = nandi(t, ctx, "dead", "replay", "-redis", url, "-group", "orders", "-all")
	if code != 0 || !strings.Contains(out, "replayed 2 of 2") {
		t.Fatalf("dead replay: exit %d\n%s%s", code, out, errOut)
	}
	_, doc = docCommand(t, "dead replay -redis $R -group orders -all")
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

// -to a stream that does not exist is made with -create; a letter of
// another transport, or one that does not say where it came from, is
// refused by a replay without -to, and kept.
func TestDeadReplayCreatesOnlyWhenAskedAndRefusesWhatItCannotPlace(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client()
	ctx := context.Background()
	url := "redis://" + s.Addr()
	dead := deadletter.Stream("g")
	add := func(fields ...any) string {
		return c.XAdd(ctx, &redis.XAddArgs{Stream: dead, Values: append([]any{deadletter.FieldKey, "7", deadletter.FieldPayload, "p"}, fields...)}).Val()
	}
	kafka := add(deadletter.FieldSystem, "kafka", deadletter.FieldSource, "orders")
	code, _, errOut := nandi(t, ctx, "dead", "replay", "-redis", url, "-group", "g", "-id", kafka)
	if code != 1 || !strings.Contains(errOut, "came from kafka orders") {
		t.Errorf("replay of a Kafka letter without -to: exit %d, %q; want 1, saying where it came from", code, errOut)
	}
	old := add()
	code, _, errOut = nandi(t, ctx, "dead", "replay", "-redis", url, "-group", "g", "-id", old)
	if code != 1 || !strings.Contains(errOut, "give -to") {
		t.Errorf("replay of a letter with no source without -to: exit %d, %q; want 1, asking for -to", code, errOut)
	}
	if n := c.XLen(ctx, dead).Val(); n != 2 {
		t.Fatalf("%d letters after refused replays; want both kept", n)
	}
	code, out, errOut := nandi(t, ctx, "dead", "replay", "-redis", url, "-group", "g", "-to", "retry", "-create", "-id", old)
	if code != 0 || !strings.Contains(out, "replayed 1 of 1") || c.XLen(ctx, "retry").Val() != 1 || c.XLen(ctx, dead).Val() != 1 {
		t.Errorf("replay -to retry -create: exit %d %s%s; stream retry has %d, dead %d; want 1 and 1", code, out, errOut, c.XLen(ctx, "retry").Val(), c.XLen(ctx, dead).Val())
	}
	if code, _, errOut := nandi(t, ctx, "dead", "replay", "-redis", url, "-group", "g", "-create", "-all"); code != 2 || !strings.Contains(errOut, "-create goes with -to") {
		t.Errorf("-create without -to: exit %d, %q", code, errOut)
	}
}
