package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// The demo end to end with a short schedule: embedded Redis and SMTP sink,
// the fleet 2 -> 3 -> 1, every mail received exactly once.
func TestDemoSendsEveryMailExactlyOnce(t *testing.T) {
	var out bytes.Buffer
	cfg := config{mails: 400, rate: 1000, interval: 200 * time.Millisecond, schedule: []int{2, 3, 1}, phase: 1500 * time.Millisecond, group: "demo-test", stream: "outbox", plain: true, role: "demo"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := demo(ctx, cfg, &out)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if !rep.FromSink || rep.Received != 400 || !rep.ok() {
		t.Fatalf("report %+v; want 400 mails received by the sink, none twice, none missing\n%s", rep, out.String())
	}
	if rep.Rebalances < 2 {
		t.Errorf("%d rebalances seen; the schedule 2 -> 3 -> 1 makes two\n%s", rep.Rebalances, out.String())
	}
	if !strings.Contains(out.String(), "every mail exactly once") {
		t.Errorf("the report does not say so:\n%s", out.String())
	}
}

// -role worker -http: the worker serves its metrics and probes while it
// sends, and stops cleanly.
func TestWorkerServesMetricsAndProbes(t *testing.T) {
	mr, err := miniredis.Run()
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	s, err := startSink()
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	cfg := config{redisURL: "redis://" + mr.Addr(), smtpAddr: s.addr(), role: "worker", interval: 200 * time.Millisecond,
		group: "ops-test", stream: "outbox", plain: true, http: "127.0.0.1:0"}
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer c.Close()
	if err := produce(context.Background(), c, cfg.stream, 0, 50, 1000); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- workerProcess(ctx, cfg, out) }()
	var base string
	deadline := time.Now().Add(10 * time.Second)
	for base == "" && time.Now().Before(deadline) {
		if _, rest, ok := strings.Cut(out.String(), "serving http://"); ok {
			base = "http://" + strings.Fields(rest)[0]
			base = strings.TrimSuffix(base, "/metrics,")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if base == "" {
		t.Fatalf("no address printed:\n%s", out.String())
	}
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for time.Now().Before(deadline) && len(s.counts()) < 50 {
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := get("/holding"); code != 200 || !strings.Contains(body, "holding 0 of 1") {
		t.Errorf("/holding: %d %q", code, body)
	}
	if code, _ := get("/ready"); code != 200 {
		t.Errorf("/ready: %d", code)
	}
	// The sink has the 50th mail before its handler returns and counts
	// it: poll (seen under load: 49 at the first scrape).
	want := `nandi_consumer_messages_total{group="ops-test",outcome="handled"} 50`
	code, body := get("/metrics")
	for time.Now().Before(deadline) && (code != 200 || !strings.Contains(body, want)) {
		time.Sleep(20 * time.Millisecond)
		code, body = get("/metrics")
	}
	if code != 200 || !strings.Contains(body, want) {
		t.Errorf("/metrics: %d, want 50 handled:\n%s", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A second run of -role producer writes new mails: their ids follow every
// entry the stream has had, so the sink gets them instead of taking them
// for mails it already has.
func TestProducerRunsWriteNewMails(t *testing.T) {
	mr, err := miniredis.Run()
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	cfg := config{redisURL: "redis://" + mr.Addr(), role: "producer", stream: "outbox", mails: 30, rate: 10000}
	var out strings.Builder
	for range 2 {
		if err := producerProcess(context.Background(), cfg, &out); err != nil {
			t.Fatal(err)
		}
	}
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer c.Close()
	xs, err := c.XRange(context.Background(), "outbox", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	ids := map[any]bool{}
	for _, x := range xs {
		ids[x.Values["id"]] = true
	}
	if len(xs) != 60 || len(ids) != 60 || !strings.Contains(out.String(), "ids 30 to 59") {
		t.Errorf("two runs of 30: %d entries, %d ids; want 60 distinct\n%s", len(xs), len(ids), out.String())
	}
}
