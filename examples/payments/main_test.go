package main

import (
	"bytes"
	"context"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nandi-go/nandi/internal/pgtest"
)

func TestMain(m *testing.M) {
	var cfg config
	if workerEnv(&cfg) {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		if err := work(ctx, cfg); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The demo end to end against a PostgreSQL of the test's own: worker
// processes killed -9 while they apply payments, and every balance right,
// no payment twice.
func TestPaymentsExactlyOnceWhileWorkersAreKilled(t *testing.T) {
	pg := pgtest.Start(t)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ok, err := demo(ctx, config{postgres: pg.URL(), group: "payments-test", payments: 3000, accounts: 50, workers: 3, kills: 4,
		interval: 300 * time.Millisecond}, &out)
	if err != nil || !ok || !strings.Contains(out.String(), "every payment exactly once") {
		t.Fatalf("demo: ok %v, %v\n%s", ok, err, out.String())
	}
	if !strings.Contains(out.String(), "killed a worker") {
		t.Errorf("no worker was killed:\n%s", out.String())
	}
}

// Without a PostgreSQL the demo says how to start one.
func TestNoPostgresSaysHowToStartOne(t *testing.T) {
	_, err := connect(context.Background(), "postgres://postgres@127.0.0.1:1/test?sslmode=disable")
	if err == nil || !strings.Contains(err.Error(), "start one") || !strings.Contains(err.Error(), "-postgres") {
		t.Fatalf("connect to nothing: %v; want a message saying how to start one", err)
	}
}
