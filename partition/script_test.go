package partition

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// scriptStore returns a store for group name on a real redis-server.
func scriptStore(t *testing.T, s *redistest.Server, name string, interval time.Duration) *redisStore {
	c := s.Client()
	st := &redisStore{client: c, key: Key(name), settings: []any{interval.Microseconds(), gapPPM(DefaultGap)},
		name: name, interval: interval, gap: DefaultGap}
	return st
}

// registerIn calls the script with token until it registers (calls outside
// the window are answered without registering).
func registerIn(t *testing.T, st *redisStore, token string) reply {
	t.Helper()
	for range 1000 {
		r, err := st.register(context.Background(), call{token: token, nonce: "nonce"})
		if err != nil {
			t.Fatal(err)
		}
		if r.registered {
			return r
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("never inside the window")
	return reply{}
}

// fields returns the c:, t: and i: fields of the group's hash by interval.
func fields(t *testing.T, s *redistest.Server, name string) (counts map[int64]int, tokens, indexes map[int64][]string) {
	t.Helper()
	v, err := s.Do("HGETALL", Key(name))
	if err != nil {
		t.Fatal(err)
	}
	counts, tokens, indexes = map[int64]int{}, map[int64][]string{}, map[int64][]string{}
	for f, val := range v.(map[any]any) {
		p := strings.SplitN(f.(string), ":", 3)
		if len(p) < 2 {
			continue
		}
		m, err := strconv.ParseInt(p[1], 10, 64)
		if err != nil {
			continue
		}
		switch p[0] {
		case "c":
			counts[m], _ = strconv.Atoi(val.(string))
		case "t":
			tokens[m] = append(tokens[m], p[2])
		case "i":
			indexes[m] = append(indexes[m], p[2])
		}
	}
	return counts, tokens, indexes
}

// The group's hash keeps the last three intervals and no more, and each
// kept interval is whole: its count, a token field and an index field for
// each registration.
func TestScriptKeepsThreeWholeIntervals(t *testing.T) {
	s := redistest.Start(t)
	const iv = 100 * time.Millisecond
	st := scriptStore(t, s, "keep", iv)
	var newest int64
	for n := range 12 {
		for w := range 4 {
			r := registerIn(t, st, strconv.Itoa(n)+"-"+strconv.Itoa(w))
			newest = max(newest, r.interval)
		}
		time.Sleep(iv)
	}
	counts, tokens, indexes := fields(t, s, "keep")
	if len(counts) == 0 || len(counts) > 3 {
		t.Errorf("counts kept for intervals %v; want the last three at most", counts)
	}
	for m, c := range counts {
		if m < newest-2 {
			t.Errorf("interval %d kept, %d intervals before the newest (%d); want forgotten", m, newest-m, newest)
		}
		if len(tokens[m]) != c || len(indexes[m]) != c {
			t.Errorf("interval %d counts %d but keeps %d tokens and %d indexes; want one of each per registration", m, c, len(tokens[m]), len(indexes[m]))
		}
	}
	for m := range tokens {
		if _, ok := counts[m]; !ok {
			t.Errorf("tokens of interval %d kept without its count", m)
		}
	}
	for m := range indexes {
		if _, ok := counts[m]; !ok {
			t.Errorf("indexes of interval %d kept without its count", m)
		}
	}
}

// After a long stretch without registrations (probes only keep the hash
// alive), the first registration sweeps every old field.
func TestScriptSweepsAfterALongIdle(t *testing.T) {
	s := redistest.Start(t)
	const iv = 100 * time.Millisecond
	st := scriptStore(t, s, "idle", iv)
	registerIn(t, st, "first")
	// Pretend the hash kept fields from 100 intervals ago and was last
	// swept at interval 0: interval by interval, that sweep would never end.
	old := time.Now().UnixMicro()/iv.Microseconds() - 100
	o := strconv.FormatInt(old, 10)
	if _, err := s.Do("HSET", Key("idle"), "low", "0", "c:"+o, "1", "t:"+o+":x", "1", "i:"+o+":1", "x"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(iv)
	registerIn(t, st, "second")
	counts, tokens, indexes := fields(t, s, "idle")
	if _, ok := counts[old]; ok || len(tokens[old]) > 0 || len(indexes[old]) > 0 {
		t.Errorf("fields of interval %d survived the sweep: count %v, tokens %v, indexes %v", old, counts[old], tokens[old], indexes[old])
	}
}

// The script keeps all of a group's state in the one key it declares:
// Redis Cluster moves a slot key by key, and guarantees a script atomic
// access only to the keys it declares.
func TestScriptTouchesOnlyItsDeclaredKey(t *testing.T) {
	s := redistest.Start(t)
	const iv = 100 * time.Millisecond
	st := scriptStore(t, s, "one", iv)
	for n := range 4 {
		registerIn(t, st, strconv.Itoa(n))
		time.Sleep(iv)
	}
	v, err := s.Do("KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	if keys := v.([]any); len(keys) != 1 || keys[0] != Key("one") {
		t.Errorf("keys after 4 registrations: %v; want only %s", keys, Key("one"))
	}
}

// logRecords is a slog.Handler that keeps every record.
type logRecords struct {
	mu  sync.Mutex
	all []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.all = append(h.all, r)
	return nil
}
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecords) WithGroup(string) slog.Handler      { return h }

func (h *logRecords) count(level slog.Level, msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.all {
		if r.Level == level && r.Message == msg {
			n++
		}
	}
	return n
}

// State changes are logged at Info with constant messages, trouble at
// Warn once per spell (not once per retry), and nothing without a Logger.
func TestLogsStateChangesAndTrouble(t *testing.T) {
	s := redistest.Start(t)
	rec := &logRecords{}
	l, err := New(s.Client(), Options{Name: "logs", Interval: 100 * time.Millisecond, Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	if _, err := l.Next(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	if rec.count(slog.LevelInfo, "lease acquired") != 1 || rec.count(slog.LevelInfo, "lease lost") != 1 {
		t.Errorf("records %v; want one \"lease acquired\" and one \"lease lost\" at Info", rec.all)
	}

	bad := &logRecords{}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer c.Close()
	l, _ = New(c, Options{Name: "logs", Interval: 100 * time.Millisecond, Logger: slog.New(bad)})
	ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_ = l.Run(ctx)
	if n := bad.count(slog.LevelWarn, "registration failing"); n != 1 || l.Stats().Failures < 5 {
		t.Errorf("%d \"registration failing\" warnings over %d failed calls; want exactly one for the spell", n, l.Stats().Failures)
	}
}

// A registration delayed by more than an interval (in the network, or a
// client's retry of a call that ran) is never counted a second time: the
// token lookup covers the interval after the first attempt, and the aimed
// interval refuses anything later.
func TestDelayedRegistrationNeverCountsTwice(t *testing.T) {
	s := redistest.Start(t)
	const iv = 200 * time.Millisecond
	st := scriptStore(t, s, "delayed", iv)
	first := registerIn(t, st, "w.1")
	// The same call arrives two intervals later (a retry whose first
	// attempt ran): inside the window of interval first.interval+2.
	for {
		r, err := st.register(context.Background(), call{token: "w.1", nonce: "nonce", aimed: first.interval})
		if err != nil {
			t.Fatal(err)
		}
		if r.interval < first.interval+2 {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		lo := gapMicros(iv.Microseconds(), gapPPM(DefaultGap))
		if r.offset < lo || r.offset > iv.Microseconds()-lo {
			time.Sleep(time.Millisecond)
			continue
		}
		if r.registered {
			t.Fatalf("a call aimed at interval %d was counted in %d", first.interval, r.interval)
		}
		break
	}
	counts, _, _ := fields(t, s, "delayed")
	if c := counts[first.interval+2]; c != 0 {
		t.Errorf("interval %d counted %d; want 0", first.interval+2, c)
	}
}

// A probe (a new worker's first call, which cannot aim yet) is answered
// with the server's time and counted nowhere, inside the window or not.
func TestProbeCountsNothing(t *testing.T) {
	s := redistest.Start(t)
	const iv = 200 * time.Millisecond
	st := scriptStore(t, s, "probe", iv)
	lo := gapMicros(iv.Microseconds(), gapPPM(DefaultGap))
	inside := 0
	for inside < 3 {
		r, err := st.register(context.Background(), call{token: "w.1", nonce: "nonce", aimed: probe, want: -1})
		if err != nil {
			t.Fatal(err)
		}
		if r.registered {
			t.Fatalf("a probe registered in interval %d", r.interval)
		}
		if r.now == 0 || r.gen == "" {
			t.Fatalf("a probe answered %+v; want the server's time and generation", r)
		}
		if r.offset >= lo && r.offset <= iv.Microseconds()-lo {
			inside++
		}
		time.Sleep(20 * time.Millisecond)
	}
	counts, tokens, _ := fields(t, s, "probe")
	if len(counts) != 0 || len(tokens) != 0 {
		t.Errorf("probes left counts %v and tokens %v; want none", counts, tokens)
	}
}
