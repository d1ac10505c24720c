package health_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nandi-go/nandi/health"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.IgnoreProxyLeaks()...) }

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
	p := redistest.NewProxy(t, s.Addr())
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
