package redisstream_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nandi-go/nandi/transport/transporttest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var streams atomic.Int64

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	transporttest.Run(t, transporttest.Harness{New: func(t *testing.T) (transport.Source, func(string, []byte)) {
		name := fmt.Sprintf("stream-%d", streams.Add(1))
		src, err := redisstream.New(c, name, redisstream.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return src, func(k string, p []byte) {
			if err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: name, Values: []any{"id", k, "payload", p}}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}})
}

func fetchOne(t *testing.T, src *redisstream.Source) *transport.Message {
	t.Helper()
	r, err := src.Open(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ms, err := r.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ms[0]
}

// An entry with its id but no payload field (its body under another name)
// is malformed, not an empty task: its error names the entry and its
// fields and says what to set, and it keeps its key (its owner reports
// it, in order). Options.OptionalPayload accepts it as empty.
func TestEntryWithoutItsPayloadFieldCarriesAnError(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	id, _ := c.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []any{"id", "7", "data", "the body"}}).Result()
	src, _ := redisstream.New(c, "s", redisstream.Options{})
	m := fetchOne(t, src)
	if m.Err == nil || m.Key != "7" {
		t.Fatalf("key %q Err %v; want key 7 and an error", m.Key, m.Err)
	}
	for _, want := range []string{id, `"payload"`, `"data"`, `"id"`, "PayloadField", "OptionalPayload"} {
		if !strings.Contains(m.Err.Error(), want) {
			t.Errorf("Err %q does not name %s", m.Err, want)
		}
	}
	opt, _ := redisstream.New(c, "s", redisstream.Options{OptionalPayload: true})
	if m := fetchOne(t, opt); m.Err != nil || len(m.Payload) != 0 || m.Headers["data"] != "the body" {
		t.Fatalf("with OptionalPayload: Err %v payload %q headers %v; want no error, empty payload, data as a header", m.Err, m.Payload, m.Headers)
	}
	named, _ := redisstream.New(c, "s", redisstream.Options{PayloadField: "data"})
	if m := fetchOne(t, named); m.Err != nil || string(m.Payload) != "the body" {
		t.Fatalf("with PayloadField data: Err %v payload %q", m.Err, m.Payload)
	}
}

func TestEntryWithoutItsIDFieldCarriesAnErrorNamingIt(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	id, _ := c.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []any{"payload", "hi", "trace", "abc"}}).Result()
	src, _ := redisstream.New(c, "s", redisstream.Options{})
	m := fetchOne(t, src)
	if m.Err == nil || !strings.Contains(m.Err.Error(), id) || !strings.Contains(m.Err.Error(), `"id"`) {
		t.Fatalf("Err = %v; want an error naming entry %s and the field", m.Err, id)
	}
	if string(m.Payload) != "hi" || m.Headers["trace"] != "abc" {
		t.Fatalf("payload %q headers %v; want hi and trace=abc", m.Payload, m.Headers)
	}
	src2, _ := redisstream.New(c, "s", redisstream.Options{Key: func(id string, v map[string]any) (string, error) { return fmt.Sprint(v["trace"]), nil }})
	if m := fetchOne(t, src2); m.Err != nil || m.Key != "abc" {
		t.Fatalf("with a Key function: key %q err %v; want abc, nil", m.Key, m.Err)
	}
}

func TestTrimDropsOnlyWhatIsBelow(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	var ids []string
	for i := range 10 {
		id, _ := c.XAdd(ctx, &redis.XAddArgs{Stream: "t", Values: []any{"id", i, "payload", ""}}).Result()
		ids = append(ids, id)
	}
	keep, _ := transport.ParsePosition(ids[6])
	off, _ := redisstream.New(c, "t", redisstream.Options{})
	_ = off.Trim(ctx, 0, keep)
	if n := c.XLen(ctx, "t").Val(); n != 10 {
		t.Fatalf("Trim without Options.Trim removed entries: %d left", n)
	}
	on, _ := redisstream.New(c, "t", redisstream.Options{Trim: true})
	if err := on.Trim(ctx, 0, keep); err != nil {
		t.Fatal(err)
	}
	// Trim keeps from the ID just before the watermark: the entry there,
	// when there is one (the last one read), tells the next term that
	// nothing unread was trimmed away.
	left, _ := c.XRange(ctx, "t", "-", "+").Result()
	if len(left) < 4 || len(left) > 5 || left[len(left)-4].ID != ids[6] {
		t.Fatalf("%d entries left; want the 4 from %s on (and at most the one before)", len(left), ids[6])
	}
}

// Sharded: n streams, a producer writing each key to StreamFor(key), on a
// single server (one blocking XREAD for all) and on a Redis Cluster of 3
// masters (one XREAD per stream, pipelined per node).
func TestConformanceSharded(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	transporttest.Run(t, transporttest.Harness{New: func(t *testing.T) (transport.Source, func(string, []byte)) {
		names := redisstream.Names(fmt.Sprintf("sharded-%d", streams.Add(1)), 4)
		src, err := redisstream.NewSharded(c, names, redisstream.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return src, func(k string, p []byte) {
			if err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: src.StreamFor(k), Values: []any{"id", k, "payload", p}}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}})
}

// Streams written with the placement before aligned shards
// (LegacyShard), read with Options.Unaligned.
func TestConformanceShardedUnaligned(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	transporttest.Run(t, transporttest.Harness{New: func(t *testing.T) (transport.Source, func(string, []byte)) {
		names := redisstream.Names(fmt.Sprintf("unaligned-%d", streams.Add(1)), 4)
		src, err := redisstream.NewSharded(c, names, redisstream.Options{Unaligned: true})
		if err != nil {
			t.Fatal(err)
		}
		return src, func(k string, p []byte) {
			if err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: src.StreamFor(k), Values: []any{"id", k, "payload", p}}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}})
}

func TestConformanceShardedOnACluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	c := cl.Client()
	transporttest.Run(t, transporttest.Harness{New: func(t *testing.T) (transport.Source, func(string, []byte)) {
		names := redisstream.Names(fmt.Sprintf("cl-%d", streams.Add(1)), 6)
		src, err := redisstream.NewSharded(c, names, redisstream.Options{Block: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return src, func(k string, p []byte) {
			if err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: src.StreamFor(k), Values: []any{"id", k, "payload", p}}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}})
}

// Names spread over a cluster's masters, a key's stream is fixed, and bad
// lists are refused.
func TestShardingHelpers(t *testing.T) {
	names := redisstream.Names("outbox", 16)
	if names[0] != "outbox:{0}" || names[15] != "outbox:{15}" {
		t.Fatalf("Names = %v", names)
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	src, _ := redisstream.NewSharded(c, names, redisstream.Options{})
	counts := map[string]int{}
	for i := range 16_000 {
		k := fmt.Sprint(i)
		s := src.StreamFor(k)
		if s != src.StreamFor(k) {
			t.Fatal("StreamFor is not stable")
		}
		counts[s]++
	}
	for _, n := range names {
		if counts[n] < 800 || counts[n] > 1200 {
			t.Errorf("stream %s got %d of 16,000 keys; want about 1,000", n, counts[n])
		}
	}
	for _, bad := range [][]string{nil, {"a", ""}, {"a", "a"}} {
		if _, err := redisstream.NewSharded(c, bad, redisstream.Options{}); err == nil {
			t.Errorf("NewSharded(%q) accepted", bad)
		}
	}
}

// runConsumer runs one worker that owns everything over src until stop.
func runConsumer(t *testing.T, c redis.UniversalClient, group string, src transport.Source) (*consumer.Consumer, *atomic.Int64, func()) {
	t.Helper()
	l, err := partition.New(c, partition.Options{Name: group, Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	cs, err := consumer.New(l, src, func(context.Context, *transport.Message) error { handled.Add(1); return nil },
		consumer.Options{CheckpointInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cs.Run(ctx) }()
	return cs, &handled, func() { cancel(); <-done }
}

// Beside an existing XREADGROUP group: XINFO GROUPS shows the nandi
// group's progress, and a second group that lags keeps its entries through
// Trim (undelivered and pending alike).
func TestBesideAnotherConsumerGroup(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	var ids []string
	for i := range 100 {
		id, _ := c.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: []any{"id", i, "payload", "x"}}).Result()
		ids = append(ids, id)
	}
	// The legacy group has been delivered 30 entries and acknowledged 20.
	if err := c.XGroupCreate(ctx, "orders", "legacy", "0").Err(); err != nil {
		t.Fatal(err)
	}
	res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "legacy", Consumer: "old", Streams: []string{"orders", ">"}, Count: 30}).Result()
	if err != nil || len(res[0].Messages) != 30 {
		t.Fatalf("XREADGROUP: %v", err)
	}
	c.XAck(ctx, "orders", "legacy", ids[:20]...)
	src, _ := redisstream.New(c, "orders", redisstream.Options{Group: "nandi", Trim: true})
	_, handled, stop := runConsumer(t, c, "beside", src)
	redistest.WaitFor(t, 10*time.Second, "every entry handled and the group's progress in XINFO GROUPS", func() bool {
		if handled.Load() < 100 {
			return false
		}
		gs, err := c.XInfoGroups(ctx, "orders").Result()
		if err != nil {
			return false
		}
		for _, g := range gs {
			if g.Name == "nandi" && g.LastDeliveredID == ids[99] {
				return true
			}
		}
		return false
	})
	stop()
	left, _ := c.XRange(ctx, "orders", "-", "+").Result()
	kept := map[string]bool{}
	for _, m := range left {
		kept[m.ID] = true
	}
	if !kept[ids[20]] || len(left) > 81 {
		t.Errorf("after the trim %d entries are left, %s among them: %v; want the legacy group's oldest pending entry %s on (and the one before it)",
			len(left), ids[20], kept[ids[20]], ids[20])
	}
}

// Entries a producer's MAXLEN trimmed away before the group read them are
// detected when the next term opens the stream, and counted.
func TestEntriesTrimmedUnreadAreCounted(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	for i := range 50 {
		c.XAdd(ctx, &redis.XAddArgs{Stream: "mails", Values: []any{"id", i, "payload", ""}})
	}
	src, _ := redisstream.New(c, "mails", redisstream.Options{})
	_, handled, stop := runConsumer(t, c, "trimmed", src)
	redistest.WaitFor(t, 10*time.Second, "the first 50", func() bool { return handled.Load() == 50 })
	stop()
	// While the group is away, a producer keeps only the last 20 entries.
	for i := range 100 {
		c.XAdd(ctx, &redis.XAddArgs{Stream: "mails", MaxLen: 20, Values: []any{"id", 50 + i, "payload", ""}})
	}
	src2, _ := redisstream.New(c, "mails", redisstream.Options{})
	cs, handled, stop := runConsumer(t, c, "trimmed", src2)
	defer stop()
	redistest.WaitFor(t, 10*time.Second, "the 20 left", func() bool { return handled.Load() == 20 })
	if n := src2.Dropped(); n != 1 {
		t.Errorf("%d lost ranges counted; want 1", n)
	}
	_ = cs
}
