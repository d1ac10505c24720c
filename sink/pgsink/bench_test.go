package pgsink_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/pgtest"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/sink/pgsink"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
)

const benchN = 100_000

var record = flag.Bool("record", false, "BenchmarkSinkFigures writes its table to "+figuresFile+", which docs/handlers.md's figures must match")

// figuresFile holds the last recorded run of BenchmarkSinkFigures:
// internal/docs checks docs/handlers.md's table against it.
const figuresFile = "../../docs/figures/sinkfigures.txt"

// BenchmarkSinkFigures prints the sink's speed against the loops a user
// would write, side by side on one PostgreSQL of its own (fsync on):
// applying 100,000 increments to 1,000 accounts.
//
//	cd sink/pgsink && go test -run '^$' -bench SinkFigures -benchtime 1x .
func BenchmarkSinkFigures(b *testing.B) {
	pg := pgtest.Start(b)
	ctx := context.Background()
	p, err := pgxpool.New(ctx, pg.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	reset := func() {
		if _, err := p.Exec(ctx, `DROP TABLE IF EXISTS accounts, idem; CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);
			INSERT INTO accounts SELECT g, 0 FROM generate_series(0, 999) g; CREATE TABLE idem (id bigint PRIMARY KEY)`); err != nil {
			b.Fatal(err)
		}
	}
	rate := func(f func()) float64 {
		reset()
		start := time.Now()
		f()
		return benchN / time.Since(start).Seconds()
	}
	autocommit := rate(func() {
		for i := range benchN {
			if _, err := p.Exec(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = $1", i%1000); err != nil {
				b.Fatal(err)
			}
		}
	})
	// What a team would try first: the same loop without waiting for the
	// WAL to reach the disk at each commit (a crash loses the last ones).
	noSync := rate(func() {
		c, err := p.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Release()
		if _, err := c.Exec(ctx, "SET synchronous_commit = off"); err != nil {
			b.Fatal(err)
		}
		defer c.Exec(ctx, "SET synchronous_commit = on")
		for i := range benchN {
			if _, err := c.Exec(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = $1", i%1000); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The cost of one plain commit on this disk, measured in the same run:
	// how the ratios below move with the disk.
	commitCost := func() time.Duration {
		const n = 2000
		start := time.Now()
		for range n {
			if err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = 0")
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start) / n
	}()
	// one task as a user would make it idempotent: a row per task, and the
	// increment only if the row is new, in one transaction
	idem := func(p *pgxpool.Pool, i int) error {
		return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, "INSERT INTO idem VALUES ($1) ON CONFLICT DO NOTHING", i)
			if err == nil && tag.RowsAffected() == 1 {
				_, err = tx.Exec(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = $1", i%1000)
			}
			return err
		})
	}
	idempotent := rate(func() {
		for i := range benchN {
			if err := idem(p, i); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The same, from 8 goroutines at once on a pool of 8 connections: a
	// user's loop at the consumer's concurrency.
	cfg, err := pgxpool.ParseConfig(pg.URL())
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 8
	p8, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer p8.Close()
	idempotent8 := rate(func() {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for i := int(next.Add(1)) - 1; i < benchN; i = int(next.Add(1)) - 1 {
					if err := idem(p8, i); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	})
	rs := redistest.Start(b)
	var prof *os.File
	if path := os.Getenv("PGSINK_CPUPROFILE"); path != "" {
		if prof, err = os.Create(path); err != nil {
			b.Fatal(err)
		}
		defer prof.Close()
	}
	commits := map[int]int64{}
	sinks := map[int]float64{}
	waits := map[int]map[string]int{}
	for _, conc := range []int{8, 32} {
		reset()
		log := memory.NewLog(4)
		for i := range benchN {
			log.Append(strconv.Itoa(i), nil)
		}
		group := fmt.Sprintf("bench-%d", conc)
		s, err := pgsink.New(ctx, p, pgsink.Options{Group: group})
		if err != nil {
			b.Fatal(err)
		}
		l, err := partition.New(rs.Client(), partition.Options{Name: group, Interval: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		// The clock starts at the first effect: the lease's start (a second
		// or two, the same at any size) is not the sink's.
		var first atomic.Pointer[time.Time]
		h := s.Handler(func(ctx context.Context, tx pgx.Tx, m *transport.Message) error {
			if first.Load() == nil {
				now := time.Now()
				first.CompareAndSwap(nil, &now)
			}
			id, _ := strconv.Atoi(m.Key)
			_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = $1", id%1000)
			return err
		})
		c, err := consumer.New(l, log.Source(), h, consumer.Options{Concurrency: conc})
		if err != nil {
			b.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = c.Run(cctx); close(done) }()
		if prof != nil {
			if err := pprof.StartCPUProfile(prof); err != nil {
				b.Fatal(err)
			}
		}
		stopSampling := func() map[string]int { return nil }
		if os.Getenv("PGSINK_WAITS") != "" {
			stopSampling = sampleWaits(b, p)
		}
		redistest.WaitFor(b, 10*time.Minute, "every increment", func() bool { return s.Stats().Applied == benchN })
		sinks[conc] = benchN / time.Since(*first.Load()).Seconds()
		waits[conc] = stopSampling()
		if prof != nil {
			pprof.StopCPUProfile()
			prof = nil // the first row only: Concurrency 8
		}
		cancel()
		<-done
		commits[conc] = s.Stats().Commits
		if st := s.Stats(); st.Conflicts > 0 || st.BatchErrors > 0 {
			b.Logf("Concurrency %d: %d deadlocks (each waits deadlock_timeout, 1s), %d failed batches", conc, st.Conflicts, st.BatchErrors)
		}
	}
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "pgsink, %s, %d increments (a plain transaction of one UPDATE: %v)\tincrements/s\tvs autocommit\n", time.Now().UTC().Format("2006-01-02"), benchN, commitCost.Round(time.Microsecond))
	fmt.Fprintf(tw, "plain pgx loop, UPDATE in autocommit (not idempotent)\t%.0f\t1.00\n", autocommit)
	fmt.Fprintf(tw, "the same with synchronous_commit = off (a crash loses the last commits)\t%.0f\t%.2f\n", noSync, noSync/autocommit)
	fmt.Fprintf(tw, "plain pgx loop, a transaction with an idempotency row per task\t%.0f\t%.2f\n", idempotent, idempotent/autocommit)
	fmt.Fprintf(tw, "the same, 8 goroutines on 8 connections\t%.0f\t%.2f\n", idempotent8, idempotent8/autocommit)
	for _, conc := range []int{8, 32} {
		fmt.Fprintf(tw, "pgsink under a consumer, Concurrency %d (exactly once, fenced; %.1f tasks per commit)\t%.0f\t%.2f\n", conc, float64(benchN)/float64(commits[conc]), sinks[conc], sinks[conc]/autocommit)
	}
	for _, conc := range []int{8, 32} {
		if w := waits[conc]; w != nil {
			fmt.Fprintf(tw, "  PostgreSQL's backends at Concurrency %d, sampled every 5ms:%s\n", conc, waitShares(w))
		}
	}
	tw.Flush()
	os.Stdout.Write(table.Bytes())
	if *record {
		recordFigures(b, table.String())
	}
	// pgsink must not fall behind what it replaces (issue 50): more
	// concurrency at least as fast, ahead of the plain autocommit loop at
	// Concurrency 8, and half as fast again at 32.
	if sinks[32] < sinks[8] {
		b.Errorf("pgsink at Concurrency 32 (%.0f/s) is slower than at Concurrency 8 (%.0f/s)", sinks[32], sinks[8])
	}
	if sinks[8] < autocommit {
		b.Errorf("pgsink at Concurrency 8 (%.0f/s) is slower than the plain autocommit loop (%.0f/s)", sinks[8], autocommit)
	}
	if sinks[32] < 1.5*autocommit {
		b.Errorf("pgsink at Concurrency 32 (%.0f/s) is below 1.5 times the plain autocommit loop (%.0f/s)", sinks[32], autocommit)
	}
	for range b.N {
	}
}

// recordFigures writes table to figuresFile with the commit it ran at.
func recordFigures(b *testing.B, table string) {
	rev, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		b.Fatalf("git describe: %v", err)
	}
	env := ""
	if os.Getenv("PGSINK_WAITS") != "" {
		env = "PGSINK_WAITS=1 "
	}
	head := fmt.Sprintf("# BenchmarkSinkFigures at %s\n# cd sink/pgsink && %sgo test -run '^$' -bench SinkFigures -benchtime 1x . -record\n", strings.TrimSpace(string(rev)), env)
	if err := os.WriteFile(figuresFile, []byte(head+table), 0o644); err != nil {
		b.Fatal(err)
	}
}

// sampleWaits samples what PostgreSQL's other client backends are doing
// every 5ms (pg_stat_activity: a wait event, or running), until the
// function it returns is called; that returns the counts.
func sampleWaits(b *testing.B, p *pgxpool.Pool) func() map[string]int {
	ctx, cancel := context.WithCancel(context.Background())
	counts := map[string]int{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rows, err := p.Query(ctx, `SELECT CASE WHEN state = 'active' AND wait_event IS NULL THEN 'running'
				WHEN state = 'idle in transaction' THEN 'idle in transaction (the worker runs)'
				WHEN state = 'idle' THEN 'idle'
				ELSE coalesce(wait_event_type || ':' || wait_event, state) END
				FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND datname = current_database()`)
			if err != nil {
				return
			}
			var what string
			_, _ = pgx.ForEachRow(rows, []any{&what}, func() error { counts[what]++; return nil })
		}
	}()
	return func() map[string]int {
		cancel()
		<-done
		return counts
	}
}

// waitShares prints counts as shares of the samples of backends not idle,
// largest first.
func waitShares(counts map[string]int) string {
	total := 0
	for what, n := range counts {
		if what != "idle" {
			total += n
		}
	}
	type share struct {
		what string
		n    int
	}
	var shares []share
	for what, n := range counts {
		if what != "idle" && 100*n >= total { // 1% and more
			shares = append(shares, share{what, n})
		}
	}
	slices.SortFunc(shares, func(a, b share) int { return b.n - a.n })
	var out strings.Builder
	for _, sh := range shares {
		fmt.Fprintf(&out, " %s %.0f%%;", sh.what, 100*float64(sh.n)/float64(max(total, 1)))
	}
	return out.String()
}
