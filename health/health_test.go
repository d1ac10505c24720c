package health_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/health"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func probe(t *testing.T, h http.Handler) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/ready", nil))
	return rec.Code, rec.Body.String()
}

// Holding is ready exactly while a term is held; Registering while the
// store answers, held or not, and not once the store stops answering.
func TestReadiness(t *testing.T) {
	s := redistest.Start(t)
	p := redistest.NewLink(t, s.Addr())
	client := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer client.Close()
	const iv = 200 * time.Millisecond
	l, err := partition.New(client, partition.Options{Name: "health", Interval: iv})
	if err != nil {
		t.Fatal(err)
	}
	holding, registering := health.Handler(l, health.Holding), health.Handler(l, health.Registering)
	if code, body := probe(t, holding); code != 503 || !strings.Contains(body, "not running") {
		t.Errorf("before Run, Holding: %d %q; want 503 saying it is not running", code, body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	redistest.WaitFor(t, 5*time.Second, "a registration answered", func() bool { return l.Stats().Calls > 0 })
	if _, held := l.Current(); !held {
		if code, _ := probe(t, holding); code != 503 {
			t.Errorf("joining, Holding: %d; want 503", code)
		}
		if code, body := probe(t, registering); code != 200 {
			t.Errorf("joining, Registering: %d %q; want 200", code, body)
		}
	}
	if _, err := l.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if code, body := probe(t, holding); code != 200 || !strings.Contains(body, "holding 0 of 1") {
		t.Errorf("held, Holding: %d %q; want 200 saying what is held", code, body)
	}
	p.Hold()
	redistest.WaitFor(t, 5*time.Second, "Registering to report the silent store", func() bool {
		code, _ := probe(t, registering)
		return code == 503
	})
	if code, _ := probe(t, holding); code != 503 {
		t.Errorf("store silent for 2 intervals, Holding: %d; want 503 (the lease ran out)", code)
	}
	p.Release()
	redistest.WaitFor(t, 5*time.Second, "Registering to recover", func() bool {
		code, _ := probe(t, registering)
		return code == 200
	})
	cancel()
	<-done
	if code, _ := probe(t, registering); code != 503 {
		t.Errorf("after Run returned, Registering: %d; want 503", code)
	}
}

// brokenOpen is a source whose Open fails until fixed.
type brokenOpen struct {
	transport.Source
	fixed atomic.Bool
}

func (b *brokenOpen) Open(ctx context.Context, from []transport.Position) (transport.Reader, error) {
	if !b.fixed.Load() {
		return nil, errors.New("broker unreachable (injected)")
	}
	return b.Source.Open(ctx, from)
}

// A worker that holds an index it cannot serve is not ready, in either
// mode, until its source opens.
func TestConsumerHoldingWhatItCannotServeIsNotReady(t *testing.T) {
	s := redistest.Start(t)
	l, err := partition.New(s.Client(), partition.Options{Name: "unserved", Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	src := &brokenOpen{Source: memory.NewLog(1).Source()}
	c, err := consumer.New(l, src, func(context.Context, *transport.Message) error { return nil }, consumer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ready := health.ConsumerHandler(c, health.Registering)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	redistest.WaitFor(t, 5*time.Second, "the lease to be held", func() bool { _, ok := l.Current(); return ok })
	redistest.WaitFor(t, 5*time.Second, "readiness to report the unserved index", func() bool {
		code, body := probe(t, ready)
		return code == 503 && strings.Contains(body, "cannot be served")
	})
	if code, _ := probe(t, health.Handler(l, health.Registering)); code != 200 {
		t.Errorf("the lease alone is ready (%d); only the consumer knows it cannot serve", code)
	}
	src.fixed.Store(true)
	redistest.WaitFor(t, 5*time.Second, "readiness once the source opens", func() bool {
		code, _ := probe(t, ready)
		return code == 200
	})
}

// The zero Mode is the recommended one: Registering.
func TestZeroModeIsRegistering(t *testing.T) {
	var m health.Mode
	if m != health.Registering {
		t.Errorf("the zero Mode is %d; want Registering (%d), the mode for readiness probes", m, health.Registering)
	}
}
