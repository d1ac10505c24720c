package presence_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/presence"
	"go.uber.org/goleak"
)

func ptr[T any](v T) *T { return &v }

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// realistic is a record as a worker of a 4-shard log writes it, with a
// last error.
func realistic(worker string, index int) *presence.Record {
	now := time.Now()
	return &presence.Record{Worker: worker, Host: "mail-sender-7d9f8c6b5-x2k4p", PID: 1, Version: "v0.4.0",
		Held: true, Index: index, Replicas: 1000, Token: now.UnixMilli(), Since: now.Add(-time.Minute),
		Handled: 1234567, Failed: 321, InFlight: 4, Pending: 12,
		LagMessages: []*int64{ptr[int64](12), ptr[int64](0), ptr[int64](3), ptr[int64](250)}, Oldest: []float64{0.8, 0, 0.1, 2.5},
		LastError: "smtp: 451 4.7.1 greylisted, try again later (mx1.example.com)", LastErrorAt: now.Add(-3 * time.Second),
		At: now, Interval: 10 * time.Second}
}

// Write, Read and Remove on a real redis-server: records come back sorted
// (holders by index, then the others by id), untrusted text as it was
// written, a long error cut, an unreadable record reported rather than
// hidden, and a record no longer written gone from both keys after its
// TTL.
func TestWriteReadRemove(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	markup := `<img src=x onerror=alert(1)>`
	long := strings.Repeat("x", 2*presence.MaxError)
	for _, r := range []*presence.Record{
		{Worker: "b", Held: true, Index: 1, Replicas: 2},
		{Worker: markup, LastError: long},
		{Worker: "a", Held: true, Index: 0, Replicas: 2},
	} {
		if err := presence.Write(ctx, c, "mail", r, ttl); err != nil {
			t.Fatal(err)
		}
	}
	if err := presence.Write(ctx, c, "mail", &presence.Record{}, ttl); err == nil {
		t.Error("a record without a worker id was written")
	}
	rs, err := presence.Read(ctx, c, "mail")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.Worker)
	}
	if got := strings.Join(ids, ","); got != "a,b,"+markup {
		t.Errorf("read %q; want a,b,%s", got, markup)
	}
	if len(rs) == 3 && len(rs[2].LastError) != presence.MaxError {
		t.Errorf("a last error of %d bytes kept %d; want %d", len(long), len(rs[2].LastError), presence.MaxError)
	}

	if err := presence.Remove(ctx, c, "mail", "b"); err != nil {
		t.Fatal(err)
	}
	c.Set(ctx, presence.RecordKey("mail", "b"), "{not json", ttl)
	c.ZAdd(ctx, presence.SetKey("mail"), redisZ(time.Now().Add(ttl), "b"))
	rs, _ = presence.Read(ctx, c, "mail")
	if len(rs) != 3 || rs[2].Worker != "b" || !strings.Contains(rs[2].LastError, "unreadable record") {
		t.Errorf("an unreadable record read as %+v; want it listed, saying so", rs)
	}

	time.Sleep(ttl + 50*time.Millisecond)
	if rs, _ := presence.Read(ctx, c, "mail"); len(rs) != 0 {
		t.Errorf("%d records read after their TTL; want none", len(rs))
	}
	if err := presence.Write(ctx, c, "mail", &presence.Record{Worker: "c"}, ttl); err != nil {
		t.Fatal(err)
	}
	if n := c.ZCard(ctx, presence.SetKey("mail")).Val(); n != 1 {
		t.Errorf("the set holds %d ids after a write; want the expired ones removed, 1 left", n)
	}
	keys, _ := c.Keys(ctx, "*").Result()
	if len(keys) != 2 {
		t.Errorf("keys %v; want the set and c's record", keys)
	}
}

// NewWorkerID is host:pid, then host:pid#n within one process.
func TestNewWorkerID(t *testing.T) {
	a, b := presence.NewWorkerID(), presence.NewWorkerID()
	if a == b || !strings.HasPrefix(a, presence.Host()+":") || !strings.HasPrefix(b, a) || !strings.Contains(b, "#") {
		t.Errorf("worker ids %q, %q; want host:pid and host:pid#n", a, b)
	}
}

// What presence costs: the bytes a worker sends per interval (its one
// pipelined round trip), and the Redis memory of a group of 1,000 workers
// on a real redis-server (used_memory before and after, and MEMORY USAGE
// of the keys). `go test -run '^$' -bench PresenceCost -benchtime 1x ./presence/`
func BenchmarkPresenceCost(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client()
	ctx := context.Background()
	const workers = 1000
	trips := &roundTrips{}
	c.AddHook(trips)
	for b.Loop() {
		c.FlushAll(ctx)
		before := usedMemory(b, c)
		for i := range workers {
			if err := presence.Write(trips.ctx(ctx), c, "mail-sender", realistic(fmt.Sprintf("mail-sender-7d9f8c6b5-%05d:1", i), i), time.Minute); err != nil {
				b.Fatal(err)
			}
		}
		after := usedMemory(b, c)
		var keyBytes int64
		for i := range workers {
			keyBytes += c.MemoryUsage(ctx, presence.RecordKey("mail-sender", fmt.Sprintf("mail-sender-7d9f8c6b5-%05d:1", i))).Val()
		}
		setBytes := c.MemoryUsage(ctx, presence.SetKey("mail-sender")).Val()
		wire := wireBytes(realistic("mail-sender-7d9f8c6b5-00000:1", 0))
		b.ReportMetric(float64(wire), "sent-bytes/worker/interval")
		b.ReportMetric(float64(trips.n.Load())/workers, "round-trips/worker/interval")
		b.ReportMetric(float64(keyBytes+setBytes)/workers, "key-bytes/worker")
		b.ReportMetric(float64(after-before)/1024, "used-KiB/1000-workers")
		b.Logf("presence of %d workers: %.0f round trip of %d bytes per worker per interval; MEMORY USAGE %d bytes per worker (records %d, set %d); used_memory +%d KiB",
			workers, float64(trips.n.Load())/workers, wire, (keyBytes+setBytes)/workers, keyBytes, setBytes, (after-before)/1024)
	}
}
