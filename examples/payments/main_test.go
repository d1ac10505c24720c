package main

import (
	"bytes"
	"context"
	"os"
	"os/signal"
	"regexp"
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
	reportIsTheGuides(t, out.String())
	// Every scheduled kill lands while payments are applied (none before
	// the first), and the report counts them.
	kills := regexp.MustCompile(`killed a worker \(-9\) and started another; (\d+) of`).FindAllStringSubmatch(out.String(), -1)
	if len(kills) != 4 || !strings.Contains(out.String(), "workers killed:  4 (-9)") {
		t.Errorf("%d kills said; want the 4 scheduled, and the report counting them:\n%s", len(kills), out.String())
	}
	for _, k := range kills {
		if k[1] == "0" {
			t.Errorf("a kill landed before any payment was applied:\n%s", out.String())
		}
	}
}

// Without a PostgreSQL the demo says how to start one.
func TestNoPostgresSaysHowToStartOne(t *testing.T) {
	_, err := connect(context.Background(), "postgres://postgres@127.0.0.1:1/test?sslmode=disable")
	if err == nil || !strings.Contains(err.Error(), "start one") || !strings.Contains(err.Error(), "-postgres") {
		t.Fatalf("connect to nothing: %v; want a message saying how to start one", err)
	}
}

// reportIsTheGuides checks the report the run printed against the one
// docs/demos.md shows: the same lines but for their figures.
func reportIsTheGuides(t *testing.T, out string) {
	t.Helper()
	doc := guideReport(t)
	j := strings.Index(out, "report (PostgreSQL)")
	if j < 0 {
		t.Fatalf("the run printed no report:\n%s", out)
	}
	digits := regexp.MustCompile(`[0-9.]+`)
	norm := func(s string) string { return digits.ReplaceAllString(strings.TrimSpace(s), "N") }
	if got, want := norm(out[j:]), norm(doc); got != want {
		t.Errorf("the report:\n%s\nis not what docs/demos.md shows:\n%s", out[j:], doc)
	}
}

// The report docs/demos.md shows is what report.print prints, from its
// figures.
func TestReportIsTheGuides(t *testing.T) {
	var out bytes.Buffer
	report{payments: 5000, applied: 5000, accounts: 100, kills: 5, took: 13329 * time.Millisecond}.print(&out)
	if want := "\n" + guideReport(t); out.String() != want {
		t.Errorf("docs/demos.md shows:\n%s\nthe demo prints:\n%s", want, out.String())
	}
}

// guideReport returns the payments report docs/demos.md shows.
func guideReport(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/demos.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "report (PostgreSQL)")
	if i < 0 {
		t.Fatal("docs/demos.md shows no payments report")
	}
	return doc[i : i+strings.Index(doc[i:], "```")]
}

// A schema of the demo's name that the demo did not create is refused,
// and nothing in it is touched.
func TestASchemaItDidNotCreateIsRefused(t *testing.T) {
	pg := pgtest.Start(t)
	ctx := context.Background()
	pool, err := connect(ctx, pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA theirs; CREATE TABLE theirs.accounts (id int); INSERT INTO theirs.accounts VALUES (7)`); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_, err = demo(ctx, config{postgres: pg.URL(), schema: "theirs", group: "g", payments: 10, accounts: 2, workers: 1, interval: 300 * time.Millisecond}, &out)
	if err == nil || !strings.Contains(err.Error(), "the demo did not create it") || !strings.Contains(err.Error(), "-schema") {
		t.Fatalf("demo in a schema it did not create: %v; want a refusal naming -schema", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM theirs.accounts WHERE id = 7`).Scan(&n); err != nil || n != 1 {
		t.Errorf("their table after the refusal: %d rows, %v; want it untouched", n, err)
	}
}

// A worker that exits on its own is reported, so that the demo replaces
// it; one the demo kills is not.
func TestFleetReportsWorkersThatExitOnTheirOwn(t *testing.T) {
	f := newFleet("/bin/sh", []string{"PATH=/usr/bin:/bin"}) // exits at once: no command on its stdin
	if err := f.start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var exits []string
	for len(exits) == 0 && time.Now().Before(deadline) {
		exits = f.exited()
		time.Sleep(10 * time.Millisecond)
	}
	if len(exits) != 1 || !strings.Contains(exits[0], "exit status 0") || f.running() != 0 {
		t.Fatalf("exits %q, %d running; want the one exit reported", exits, f.running())
	}
	g := newFleet("/bin/sleep", nil)
	if err := g.startArgs("30"); err != nil {
		t.Fatal(err)
	}
	g.kill(0)
	time.Sleep(200 * time.Millisecond)
	if exits := g.exited(); len(exits) != 0 {
		t.Errorf("a worker the demo killed was reported as exiting on its own: %q", exits)
	}
}
