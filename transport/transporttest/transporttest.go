package transporttest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nandi-go/nandi/transport"
	"go.uber.org/goleak"
)

// Harness makes what the suite needs.
type Harness struct {
	// New returns a source over a fresh, empty topic (stream, subject, log)
	// and a function that publishes one message to it. The test's cleanup
	// releases them.
	New func(t *testing.T) (transport.Source, func(key string, payload []byte))
	// Settle, if set, is how long to wait after Open before publishing, for
	// sources that subscribe asynchronously.
	Settle time.Duration
	// Headers says the source delivers headers of its own with every
	// message (a Watermill subscriber: the message's UUID and metadata).
	Headers bool
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	t.Run("Delivery", func(t *testing.T) { delivery(t, h) })
	t.Run("Positions", func(t *testing.T) { positions(t, h) })
	t.Run("ReadFromPosition", func(t *testing.T) { fromPosition(t, h) })
	t.Run("Reread", func(t *testing.T) { reread(t, h) })
	t.Run("Backlog", func(t *testing.T) { backlog(t, h) })
	t.Run("Shards", func(t *testing.T) { someShards(t, h) })
	t.Run("ContextEnd", func(t *testing.T) { contextEnd(t, h) })
	t.Run("Close", func(t *testing.T) { closing(t, h) })
}

const wait = 10 * time.Second

func open(t *testing.T, h Harness, src transport.Source, from []transport.Position) transport.Reader {
	t.Helper()
	r, err := src.Open(context.Background(), from)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	if h.Settle > 0 {
		time.Sleep(h.Settle)
	}
	return r
}

// read fetches until n messages have come, or fails.
func read(t *testing.T, r transport.Reader, n int) []*transport.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var out []*transport.Message
	for len(out) < n {
		ms, err := r.Fetch(ctx)
		if err != nil {
			t.Fatalf("Fetch after %d of %d messages: %v", len(out), n, err)
		}
		if len(ms) == 0 {
			t.Fatalf("Fetch returned no message and no error")
		}
		for _, m := range ms {
			if m.Ack != nil {
				m.Ack() // sources that deliver one at a time wait for it
			}
		}
		out = append(out, ms...)
	}
	return out
}

func info(t *testing.T, src transport.Source) transport.Info {
	t.Helper()
	in, err := src.Info(context.Background())
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if in.Shards < 1 {
		t.Fatalf("Info.Shards = %d; want at least 1", in.Shards)
	}
	if in.Log && len(in.Ends) != in.Shards {
		t.Fatalf("a log's Info.Ends has %d positions for %d shards", len(in.Ends), in.Shards)
	}
	// Tracing names its spans from these (OpenTelemetry's messaging.system
	// and messaging.destination.name).
	if in.System == "" {
		t.Errorf("Info.System is empty; want the messaging system (redis, kafka, nats, ...)")
	}
	if len(in.Destinations) != 1 && len(in.Destinations) != in.Shards {
		t.Errorf("Info.Destinations has %d names for %d shards; want one, or one per shard", len(in.Destinations), in.Shards)
	}
	return in
}

// Every message published while a reader is open reaches it, each once,
// in publish order per key; and a second reader sees them all too
// (fan-out).
func delivery(t *testing.T, h Harness) {
	src, publish := h.New(t)
	info(t, src)
	a, b := open(t, h, src, nil), open(t, h, src, nil)
	const keys, each = 17, 30
	// Publish while both readers read: a source may deliver one message at
	// a time per subscriber, and hold its publisher until they take it.
	published := background(func() {
		for s := range each {
			for k := range keys {
				publish(strconv.Itoa(k), []byte(fmt.Sprintf("%d/%d", k, s)))
			}
		}
	})
	got := map[string][]*transport.Message{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, r := range map[string]transport.Reader{"first": a, "second": b} {
		wg.Go(func() {
			ms := read(t, r, keys*each)
			mu.Lock()
			got[name] = ms
			mu.Unlock()
		})
	}
	wg.Wait()
	published()
	for name, ms := range got {
		if len(ms) != keys*each {
			t.Fatalf("%s reader: %d messages; want %d (each once)", name, len(ms), keys*each)
		}
		next := map[string]int{}
		for _, m := range ms {
			want := fmt.Sprintf("%s/%d", m.Key, next[m.Key])
			if string(m.Payload) != want {
				t.Fatalf("%s reader: key %s delivered %q when %q was due", name, m.Key, m.Payload, want)
			}
			next[m.Key]++
			// One rule for every transport: the task id is Message.Key and
			// only there (the field, header or key that carried it is not
			// among Headers); a message published with no headers has none.
			if len(m.Headers) != 0 && !h.Headers {
				t.Fatalf("%s reader: key %s delivered with headers %v; a message published with none has none (the task id is Message.Key, not a header)", name, m.Key, m.Headers)
			}
		}
	}
}

// background runs f in a goroutine; the returned function waits for it.
func background(f func()) func() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	return func() { <-done }
}

// A log's positions increase within each shard, Info.Ends is past every
// message, and a message's shard is within Info.Shards.
func positions(t *testing.T, h Harness) {
	src, publish := h.New(t)
	if !info(t, src).Log {
		t.Skip("not a log (Info.Log is false): no positions to check")
	}
	r := open(t, h, src, nil)
	defer r.Close()
	for i := range 200 {
		publish(strconv.Itoa(i%7), []byte(strconv.Itoa(i)))
	}
	got := read(t, r, 200)
	in := info(t, src)
	last := map[int]transport.Position{}
	for _, m := range got {
		if m.Shard < 0 || m.Shard >= in.Shards {
			t.Fatalf("message in shard %d; Info says %d shards", m.Shard, in.Shards)
		}
		if p, ok := last[m.Shard]; ok && !p.Less(m.Position) {
			t.Fatalf("shard %d: position %v after %v", m.Shard, m.Position, p)
		}
		last[m.Shard] = m.Position
		if !m.Position.Less(in.Ends[m.Shard]) {
			t.Fatalf("shard %d: Info.Ends %v is not past message %v", m.Shard, in.Ends[m.Shard], m.Position)
		}
	}
}

// Open from a message's position delivers it first in its shard, then
// everything after it; from the ends delivers only what comes next.
func fromPosition(t *testing.T, h Harness) {
	src, publish := h.New(t)
	if !info(t, src).Log {
		t.Skip("not a log (Info.Log is false): cannot read from a position")
	}
	for i := range 100 {
		publish(strconv.Itoa(i%5), []byte(strconv.Itoa(i)))
	}
	all := read(t, open(t, h, src, nil), 100)
	pick := all[37]
	var after []string
	for _, m := range all {
		if m.Shard == pick.Shard && !m.Position.Less(pick.Position) {
			after = append(after, string(m.Payload))
		}
	}
	in := info(t, src)
	from := append([]transport.Position(nil), in.Ends...)
	from[pick.Shard] = pick.Position
	r := open(t, h, src, from)
	defer r.Close()
	got := read(t, r, len(after))
	for i, m := range got {
		if m.Shard != pick.Shard || string(m.Payload) != after[i] {
			t.Fatalf("read from %v: message %d is %q in shard %d; want %q in shard %d", pick.Position, i, m.Payload, m.Shard, after[i], pick.Shard)
		}
	}
	publish("x", []byte("new"))
	if ms := read(t, open(t, h, src, in.Ends), 1); string(ms[0].Payload) != "new" {
		t.Fatalf("read from the ends: got %q first; want only what came after", ms[0].Payload)
	}
}

// A log that counts (transport.Counter) says, for any positions, how many
// of each shard's messages are at or after them: what Fetch delivers from
// there, counted. From nothing, every message; from the ends, none.
func backlog(t *testing.T, h Harness) {
	src, publish := h.New(t)
	c, ok := src.(transport.Counter)
	if !ok || !info(t, src).Log {
		t.Skip("not a transport.Counter")
	}
	for i := range 150 {
		publish(strconv.Itoa(i%7), []byte(strconv.Itoa(i)))
	}
	all := read(t, open(t, h, src, nil), 150)
	in := info(t, src)
	check := func(what string, from []transport.Position) {
		t.Helper()
		want := make([]int64, in.Shards)
		for _, m := range all {
			if m.Shard >= len(from) || !m.Position.Less(from[m.Shard]) {
				want[m.Shard]++
			}
		}
		got, err := c.Backlog(context.Background(), from)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("Backlog from %s: %v; counted, %v", what, got, want)
		}
	}
	check("nothing", nil)
	check("the ends", in.Ends)
	for _, k := range []int{0, 1, 77, 149} {
		from := append([]transport.Position(nil), in.Ends...)
		from[all[k].Shard] = all[k].Position
		check(fmt.Sprintf("message %d", k), from)
		from = make([]transport.Position, in.Shards)
		from[all[k].Shard] = all[k].Position
		check(fmt.Sprintf("message %d, the other shards from their start", k), from)
	}
}

// A log that can read entries again (transport.Rereader) returns, for any
// positions of a shard, the messages Fetch delivered there, in the order
// asked; a position it no longer has comes back with Err set, never left
// out.
func reread(t *testing.T, h Harness) {
	src, publish := h.New(t)
	if !info(t, src).Log {
		t.Skip("not a log (Info.Log is false): nothing to read again")
	}
	rr, ok := src.(transport.Rereader)
	if !ok {
		t.Skip("not a transport.Rereader: a consumer holds tasks waiting behind a failing id whole, within MaxPending")
	}
	for i := range 120 {
		publish(strconv.Itoa(i%6), []byte(strconv.Itoa(i)))
	}
	all := read(t, open(t, h, src, nil), 120)
	byShard := map[int][]*transport.Message{}
	for _, m := range all {
		byShard[m.Shard] = append(byShard[m.Shard], m)
	}
	in := info(t, src)
	for shard, ms := range byShard {
		var at []transport.Position
		var want []*transport.Message
		for i, m := range ms {
			if i%3 == 0 || i == len(ms)-1 {
				at = append(at, m.Position)
				want = append(want, m)
			}
		}
		at = append(at, in.Ends[shard]) // nothing there yet
		got, err := rr.Reread(context.Background(), shard, at)
		if err != nil {
			t.Fatalf("Reread shard %d: %v", shard, err)
		}
		if len(got) != len(at) {
			t.Fatalf("Reread shard %d of %d positions returned %d messages; want one per position", shard, len(at), len(got))
		}
		for i, w := range want {
			g := got[i]
			if g.Err != nil || g.Key != w.Key || string(g.Payload) != string(w.Payload) || g.Shard != shard || g.Position != w.Position || len(g.Headers) != len(w.Headers) {
				t.Fatalf("Reread shard %d at %v: key %q payload %q shard %d position %v err %v; want key %q payload %q at %v, as Fetch delivered it",
					shard, at[i], g.Key, g.Payload, g.Shard, g.Position, g.Err, w.Key, w.Payload, w.Position)
			}
		}
		if last := got[len(got)-1]; last.Err == nil || last.Position != in.Ends[shard] || last.Key == "" {
			t.Fatalf("Reread shard %d at its end %v: %+v; want a message at that position with a key and Err saying it is not there", shard, in.Ends[shard], last)
		}
	}
}

// A source that reads some shards only (transport.ShardOpener) delivers
// every message of those shards, in order, and none of the others; an
// aligned source (Info.Aligned) holds in shard s only keys whose task id
// has id % Shards == s.
func someShards(t *testing.T, h Harness) {
	src, publish := h.New(t)
	in := info(t, src)
	so, ok := src.(transport.ShardOpener)
	if !ok {
		t.Skip("not a transport.ShardOpener: every reader reads every shard")
	}
	if in.Shards < 2 {
		t.Skip("one shard: nothing to read apart")
	}
	var pick []int
	for s := 0; s < in.Shards; s += 2 {
		pick = append(pick, s)
	}
	picked := map[int]bool{}
	for _, s := range pick {
		picked[s] = true
	}
	var from []transport.Position
	if in.Log {
		from = in.Ends
	}
	r, err := so.OpenShards(context.Background(), from, pick)
	if err != nil {
		t.Fatalf("OpenShards(%v): %v", pick, err)
	}
	t.Cleanup(func() { _ = r.Close() })
	if h.Settle > 0 {
		time.Sleep(h.Settle)
	}
	// Every key's shard, from a reader of all of them.
	all, err := src.Open(context.Background(), from)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = all.Close() })
	if h.Settle > 0 {
		time.Sleep(h.Settle)
	}
	const n = 120
	published := background(func() {
		for i := range n {
			publish(strconv.Itoa(i), []byte(strconv.Itoa(i)))
		}
	})
	everything := read(t, all, n)
	published()
	want := 0
	for _, m := range everything {
		if in.Aligned && uint64(m.Shard) != transport.TaskID(m.Key)%uint64(in.Shards) {
			t.Fatalf("an aligned source put key %s (task id %d) in shard %d of %d", m.Key, transport.TaskID(m.Key), m.Shard, in.Shards)
		}
		if picked[m.Shard] {
			want++
		}
	}
	if want == 0 {
		t.Fatalf("no message landed in shards %v of %d", pick, in.Shards)
	}
	got := read(t, r, want)
	for _, m := range got {
		if !picked[m.Shard] {
			t.Fatalf("a reader of shards %v delivered a message of shard %d", pick, m.Shard)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if extra, err := r.Fetch(ctx); err == nil && len(extra) > 0 {
		t.Fatalf("a reader of shards %v delivered %d more messages than its shards hold (first in shard %d)", pick, len(extra), extra[0].Shard)
	}
}

// Fetch returns the context's error promptly when it ends, and leaves
// nothing consumed.
func contextEnd(t *testing.T, h Harness) {
	src, publish := h.New(t)
	r := open(t, h, src, nil)
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := r.Fetch(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Fetch on an idle source with a 50ms context = %v; want context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Fetch returned %v after its context ended; a blocking read ignores the context", took)
	}
	published := background(func() { publish("1", []byte("after")) })
	if ms := read(t, r, 1); string(ms[0].Payload) != "after" {
		t.Fatalf("after a cancelled Fetch got %q; want the next message", ms[0].Payload)
	}
	published()
}

// Close unblocks a Fetch (ErrClosed), may be called twice, and leaves no
// goroutine of the reader behind.
func closing(t *testing.T, h Harness) {
	src, _ := h.New(t)
	ignore := goleak.IgnoreCurrent()
	r := open(t, h, src, nil)
	done := make(chan error, 1)
	go func() {
		_, err := r.Fetch(context.Background())
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("Fetch blocked across Close returned %v; want transport.ErrClosed", err)
		}
	case <-time.After(wait):
		t.Fatal("Close did not unblock Fetch")
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := goleak.Find(ignore); err != nil {
		t.Fatalf("goroutines left behind after Close: %v", err)
	}
}
