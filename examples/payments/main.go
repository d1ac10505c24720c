// Command payments applies payments to account balances in PostgreSQL,
// exactly once, with a fleet of worker processes that it kills (-9) and
// restarts while they work; then it checks every balance against the sum
// of its payments and that no payment was applied twice.
//
//	cd examples/payments && go run .     # the machine's PostgreSQL, an embedded Redis
//	cd examples/payments && go run . -postgres URL -payments 20000 -workers 4
//
// Each worker is a consumer of a Redis stream of payments under a lease,
// with sink/pgsink's handler: each payment's UPDATE commits in the same
// transaction as its record as done, fenced by the worker's term.
//
// Everything it writes in PostgreSQL is in a schema of its own (-schema,
// default nandi_payments_demo), which it creates and marks as its own; it
// refuses a schema of that name it did not create, and drops nothing
// outside it. A worker that exits outside the demo's schedule is replaced
// (and said so); it prints its progress, and it fails at once, saying
// why, when nothing is applied for 30 s.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/sink/pgsink"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/redis/go-redis/v9"
)

// DefaultPostgres is the machine's PostgreSQL service (trust
// authentication, database test).
const DefaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

type config struct {
	postgres, redis string
	schema          string
	role            string
	group           string
	payments        int
	accounts        int
	workers         int
	kills           int
	interval        time.Duration
}

func main() {
	var cfg config
	flag.StringVar(&cfg.postgres, "postgres", DefaultPostgres, "PostgreSQL URL")
	flag.StringVar(&cfg.schema, "schema", "nandi_payments_demo", "the schema the demo creates and writes in (refused if it exists and the demo did not create it)")
	flag.StringVar(&cfg.redis, "redis", "", "Redis URL (default: an embedded one)")
	flag.StringVar(&cfg.role, "role", "demo", "demo, or worker (one worker process; the demo starts them)")
	flag.StringVar(&cfg.group, "group", "payments", "the consumer group (and the sink's)")
	flag.IntVar(&cfg.payments, "payments", 5000, "payments to apply")
	flag.IntVar(&cfg.accounts, "accounts", 100, "accounts")
	flag.IntVar(&cfg.workers, "workers", 3, "worker processes")
	flag.IntVar(&cfg.kills, "kills", 5, "how many times a worker is killed (-9) and replaced while they work")
	flag.DurationVar(&cfg.interval, "interval", 300*time.Millisecond, "the lease interval")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if workerEnv(&cfg) {
		cfg.role = "worker"
	}
	var err error
	if cfg.role == "worker" {
		err = work(ctx, cfg)
	} else {
		var ok bool
		ok, err = demo(ctx, cfg, os.Stdout)
		if err == nil && !ok {
			os.Exit(1)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		os.Exit(1)
	}
}

func stream(group string) string { return group + ":payments" }

// The demo starts its workers as this same executable with their
// settings in the environment (so that a test binary, which parses its own
// flags, can be one too).
const (
	envWorker   = "PAYMENTS_WORKER"
	envPostgres = "PAYMENTS_POSTGRES"
	envRedis    = "PAYMENTS_REDIS"
	envGroup    = "PAYMENTS_GROUP"
	envInterval = "PAYMENTS_INTERVAL"
	envSchema   = "PAYMENTS_SCHEMA"
)

// workerEnv fills cfg from the environment of a worker process the demo
// started, and reports whether this is one.
func workerEnv(cfg *config) bool {
	if os.Getenv(envWorker) == "" {
		return false
	}
	cfg.postgres, cfg.redis, cfg.group, cfg.schema = os.Getenv(envPostgres), os.Getenv(envRedis), os.Getenv(envGroup), os.Getenv(envSchema)
	cfg.interval, _ = time.ParseDuration(os.Getenv(envInterval))
	return true
}

// connect opens the pool (its connections in schema, when given: the
// demo's tables, and the sink's, live there) and checks that PostgreSQL
// answers, saying how to start one when it does not.
func connect(ctx context.Context, url string, schema ...string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("-postgres %q: %w", url, err)
	}
	if len(schema) > 0 && schema[0] != "" {
		pc.ConnConfig.RuntimeParams["search_path"] = schema[0]
	}
	p, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("-postgres %q: %w", url, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := p.Ping(pctx); err != nil {
		p.Close()
		return nil, fmt.Errorf("no PostgreSQL answers at %s (%v): start one (Debian: pg_ctlcluster 15 main start; or docker run -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres), or give its URL with -postgres", url, err)
	}
	return p, nil
}

// demo runs the fleet and reports; ok is false when a balance is wrong or
// a payment was applied twice.
func demo(ctx context.Context, cfg config, out io.Writer) (ok bool, err error) {
	if cfg.schema == "" {
		cfg.schema = "nandi_payments_demo"
	}
	if err := ownSchema(ctx, cfg.postgres, cfg.schema); err != nil {
		return false, err
	}
	pool, err := connect(ctx, cfg.postgres, cfg.schema)
	if err != nil {
		return false, err
	}
	defer pool.Close()
	if cfg.redis == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return false, err
		}
		defer mr.Close()
		cfg.redis = "redis://" + mr.Addr()
	}
	ropts, err := redis.ParseURL(cfg.redis)
	if err != nil {
		return false, fmt.Errorf("-redis %q: %w", cfg.redis, err)
	}
	rc := redis.NewClient(ropts)
	defer rc.Close()
	// A fresh run, inside the demo's own schema: the accounts, and the
	// sink's records of this group.
	if _, err := pool.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS accounts;
		CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);
		INSERT INTO accounts SELECT g, 0 FROM generate_series(0, %d) g`, cfg.accounts-1)); err != nil {
		return false, err
	}
	if _, err := pgsink.New(ctx, pool, pgsink.Options{Group: cfg.group, Schema: cfg.schema}); err != nil {
		return false, err
	}
	for _, t := range []string{"nandi_done", "nandi_fence", "nandi_low"} {
		if _, err := pool.Exec(ctx, "DELETE FROM "+t+" WHERE grp = $1", cfg.group); err != nil {
			return false, err
		}
	}
	_ = rc.Del(ctx, stream(cfg.group), partition.Key(cfg.group), partition.KeyPrefix(cfg.group)+"ledger").Err()
	expect := make([]int64, cfg.accounts)
	for i := 0; i < cfg.payments; i += 500 {
		p := rc.Pipeline()
		for j := i; j < min(i+500, cfg.payments); j++ {
			account, amount := j%cfg.accounts, j%7+1
			expect[account] += int64(amount)
			p.XAdd(ctx, &redis.XAddArgs{Stream: stream(cfg.group), Values: []any{"id", j, "payload", fmt.Sprintf("%d %d", account, amount)}})
		}
		if _, err := p.Exec(ctx); err != nil {
			return false, err
		}
	}
	fmt.Fprintf(out, "%d payments to %d accounts, %d workers, %d kills -9\n", cfg.payments, cfg.accounts, cfg.workers, cfg.kills)

	self, err := os.Executable()
	if err != nil {
		return false, err
	}
	f := newFleet(self, append(os.Environ(), envWorker+"=1", envPostgres+"="+cfg.postgres, envRedis+"="+cfg.redis,
		envGroup+"="+cfg.group, envInterval+"="+cfg.interval.String(), envSchema+"="+cfg.schema))
	defer f.stopAll(syscall.SIGKILL)
	for range cfg.workers {
		if err := f.start(); err != nil {
			return false, err
		}
	}
	recorded := func() (n int) {
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM nandi_done WHERE grp = $1", cfg.group).Scan(&n)
		return n
	}
	// killCheckEvery is how often the kill schedule is checked: far less
	// than the time the sink takes to apply a quarter of the payments.
	const killCheckEvery = 20 * time.Millisecond
	began := time.Now()
	kills, crashed, last, progressAt, lastReport := 0, 0, 0, time.Now(), time.Now()
	for {
		n := recorded()
		if n >= cfg.payments {
			break
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if n > last {
			last, progressAt = n, time.Now()
		}
		if time.Since(progressAt) > stallLimit {
			return false, fmt.Errorf("no payment applied for %v (%d of %d applied, %d workers running; %s): check the workers' errors above, PostgreSQL and Redis",
				stallLimit, n, cfg.payments, f.running(), f.lastExit())
		}
		if time.Since(lastReport) >= 2*time.Second {
			fmt.Fprintf(out, "  %d of %d applied, %d workers running\n", n, cfg.payments, f.running())
			lastReport = time.Now()
		}
		// A worker that exits outside the schedule (a crash, a bad
		// setting) is replaced, and said so.
		for _, exit := range f.exited() {
			crashed++
			fmt.Fprintf(out, "  a worker exited on its own (%s); starting another\n", exit)
			if err := f.start(); err != nil {
				return false, err
			}
		}
		// The kills are spread over the work: kill k once (k+1)/(kills+1)
		// of the payments are applied, so that each lands while workers
		// apply payments (none before the first is applied). Checked every
		// killCheckEvery on the count just read: the sink applies thousands
		// a second, and a check once an interval, on a count read before
		// its sleep, saw 1,061 then all 3,000 applied, the last kills never
		// made.
		if kills < cfg.kills && f.running() > 0 && n > 0 && n >= (kills+1)*cfg.payments/(cfg.kills+1) {
			f.kill(kills)
			kills++
			if err := f.start(); err != nil {
				return false, err
			}
			fmt.Fprintf(out, "  killed a worker (-9) and started another; %d of %d applied\n", recorded(), cfg.payments)
		}
		time.Sleep(killCheckEvery)
	}
	took := time.Since(began)
	time.Sleep(3 * cfg.interval) // anything applied twice shows up now
	f.stopAll(syscall.SIGTERM)

	var n, twice int
	if err := pool.QueryRow(ctx, "SELECT count(*), count(*) - count(DISTINCT (shard, hi, lo)) FROM nandi_done WHERE grp = $1", cfg.group).Scan(&n, &twice); err != nil {
		return false, err
	}
	wrong := 0
	rows, err := pool.Query(ctx, "SELECT id, balance FROM accounts ORDER BY id")
	if err != nil {
		return false, err
	}
	for rows.Next() {
		var id int
		var b int64
		if err := rows.Scan(&id, &b); err != nil {
			return false, err
		}
		if b != expect[id] {
			wrong++
		}
	}
	rows.Close()
	r := report{payments: cfg.payments, applied: n, twice: twice, wrong: wrong, accounts: cfg.accounts, kills: kills, crashed: crashed, took: took}
	r.print(out)
	return r.ok(), nil
}

// report is what the demo found in PostgreSQL.
type report struct {
	payments, applied, twice, wrong, accounts, kills int
	crashed                                          int // workers that exited on their own, replaced
	took                                             time.Duration
}

func (r report) ok() bool { return r.applied == r.payments && r.twice == 0 && r.wrong == 0 }

func (r report) print(out io.Writer) {
	fmt.Fprintf(out, "\nreport (PostgreSQL)\n")
	fmt.Fprintf(out, "  payments:        %d\n", r.payments)
	fmt.Fprintf(out, "  applied:         %d (each recorded once: %d twice)\n", r.applied, r.twice)
	fmt.Fprintf(out, "  balances wrong:  %d of %d\n", r.wrong, r.accounts)
	fmt.Fprintf(out, "  workers killed:  %d (-9), %d more exited on their own\n", r.kills, r.crashed)
	fmt.Fprintf(out, "  took:            %v\n", r.took.Round(time.Millisecond))
	if r.ok() {
		fmt.Fprintln(out, "  result:          OK, every payment exactly once")
	} else {
		fmt.Fprintln(out, "  result:          FAILED")
	}
}

// work is one worker process: a consumer of the payments stream with the
// sink's handler, until SIGTERM (or kill -9).
func work(ctx context.Context, cfg config) error {
	pool, err := connect(ctx, cfg.postgres, cfg.schema)
	if err != nil {
		return err
	}
	defer pool.Close()
	ropts, err := redis.ParseURL(cfg.redis)
	if err != nil {
		return err
	}
	rc := redis.NewClient(ropts)
	defer rc.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sink, err := pgsink.New(ctx, pool, pgsink.Options{Group: cfg.group, Schema: cfg.schema, Logger: logger})
	if err != nil {
		return err
	}
	lease, err := partition.New(rc, partition.Options{Name: cfg.group, Interval: cfg.interval, Logger: logger})
	if err != nil {
		return err
	}
	src, err := redisstream.New(rc, stream(cfg.group), redisstream.Options{})
	if err != nil {
		return err
	}
	apply := sink.Handler(func(ctx context.Context, tx pgx.Tx, m *transport.Message) error {
		f := strings.Fields(string(m.Payload))
		if len(f) != 2 {
			return consumer.Permanent(fmt.Errorf("payment %s: payload %q is not \"account amount\"", m.Key, m.Payload))
		}
		account, err1 := strconv.Atoi(f[0])
		amount, err2 := strconv.Atoi(f[1])
		if err := errors.Join(err1, err2); err != nil {
			return consumer.Permanent(fmt.Errorf("payment %s: %w", m.Key, err))
		}
		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", amount, account)
		return err
		// The effect boundary is the sink's commit: the handler returns
		// nil once it has committed, and nothing after it can fail the
		// task.
	})
	c, err := consumer.New(lease, src, apply, consumer.Options{Concurrency: 8, Logger: logger})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}
