package pgsink_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
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
	commits := map[int]int64{}
	sinks := map[int]float64{}
	for _, conc := range []int{8, 32} {
		sinks[conc] = rate(func() {
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
			h := s.Handler(func(ctx context.Context, tx pgx.Tx, m *transport.Message) error {
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
			redistest.WaitFor(b, 10*time.Minute, "every increment", func() bool { return s.Stats().Applied == benchN })
			cancel()
			<-done
			commits[conc] = s.Stats().Commits
		})
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "pgsink, %s, %d increments (a plain transaction of one UPDATE: %v)\tincrements/s\tvs autocommit\n", time.Now().UTC().Format("2006-01-02"), benchN, commitCost.Round(time.Microsecond))
	fmt.Fprintf(tw, "plain pgx loop, UPDATE in autocommit (not idempotent)\t%.0f\t1.00\n", autocommit)
	fmt.Fprintf(tw, "the same with synchronous_commit = off (a crash loses the last commits)\t%.0f\t%.2f\n", noSync, noSync/autocommit)
	fmt.Fprintf(tw, "plain pgx loop, a transaction with an idempotency row per task\t%.0f\t%.2f\n", idempotent, idempotent/autocommit)
	fmt.Fprintf(tw, "the same, 8 goroutines on 8 connections\t%.0f\t%.2f\n", idempotent8, idempotent8/autocommit)
	for _, conc := range []int{8, 32} {
		fmt.Fprintf(tw, "pgsink under a consumer, Concurrency %d (exactly once, fenced; %.1f tasks per commit)\t%.0f\t%.2f\n", conc, float64(benchN)/float64(commits[conc]), sinks[conc], sinks[conc]/autocommit)
	}
	// pgsink must not fall behind what it replaces: more concurrency at
	// least as fast, and ahead of the plain autocommit loop (issue 50).
	if sinks[32] < sinks[8] {
		b.Errorf("pgsink at Concurrency 32 (%.0f/s) is slower than at Concurrency 8 (%.0f/s)", sinks[32], sinks[8])
	}
	if sinks[32] < autocommit {
		b.Errorf("pgsink at Concurrency 32 (%.0f/s) is slower than the plain autocommit loop (%.0f/s)", sinks[32], autocommit)
	}
	for range b.N {
	}
}
