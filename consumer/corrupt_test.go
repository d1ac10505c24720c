package consumer_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
)

// errorLog records the messages logged at Error.
type errorLog struct {
	mu   sync.Mutex
	msgs []string
}

func (h *errorLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *errorLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *errorLog) WithGroup(string) slog.Handler            { return h }
func (h *errorLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		var b strings.Builder
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.Key + "=" + a.Value.String())
			return true
		})
		h.mu.Lock()
		h.msgs = append(h.msgs, b.String())
		h.mu.Unlock()
	}
	return nil
}

func (h *errorLog) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.msgs...)
}

// A worker that meets a corrupt checkpoint ledger (a field that used to
// panic every worker's Open with an index out of range) serves nothing of
// it, says so at Error naming the field, counts it, and keeps running;
// once the field is repaired it serves the log.
func TestCorruptLedgerServesNothingAndKeepsRunning(t *testing.T) {
	cl := server(t).Client()
	defer cl.Close()
	l := lease(t, cl)
	group := l.Options().Name
	ctx := context.Background()
	ledger := checkpoint.NewRedis(cl, group)
	if _, err := ledger.Open(ctx, checkpoint.OpenRequest{Replicas: 1, Token: 1, Origin: []transport.Position{{}}}); err != nil {
		t.Fatal(err)
	}
	const bad = "1:0:0" // index 0's mark in shard 0
	if err := cl.HSet(ctx, checkpoint.Key(group)+":marks", bad, "garbage").Err(); err != nil {
		t.Fatal(err)
	}
	log := memory.NewLog(1)
	for i := range 20 {
		log.Append(strconv.Itoa(i), []byte("x"))
	}
	var handled atomic.Int64
	rec := &errorLog{}
	c, err := consumer.New(l, log.Source(), func(context.Context, *transport.Message) error {
		handled.Add(1)
		return nil
	}, consumer.Options{Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	defer stop()
	waitFor(t, "the corrupt ledger to be met", func() bool { return c.Stats().CorruptLedger >= 3 })
	if n := handled.Load(); n != 0 {
		t.Fatalf("%d tasks handled from a corrupt ledger; want none served", n)
	}
	if st := c.Stats(); !st.Unserved {
		t.Errorf("Stats.Unserved is false while the ledger cannot be opened")
	}
	msgs := rec.all()
	if len(msgs) != 1 || !strings.Contains(msgs[0], "corrupt") || !strings.Contains(msgs[0], bad) {
		t.Errorf("records at Error %q; want one saying the ledger is corrupt, naming %s", msgs, bad)
	}
	if err := cl.HDel(ctx, checkpoint.Key(group)+":marks", bad).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every task, once the ledger was repaired", func() bool { return handled.Load() == 20 })
}
