package pgsink_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/faultproxy"
	"github.com/nandi-go/nandi/internal/pgtest"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/sink/pgsink"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// The fault suite of the sink: worker processes (this test binary, run
// as a worker) apply payments from a Redis stream to account balances in
// a real PostgreSQL through the sink, while the test kills them (-9),
// pauses them past their lease (SIGSTOP), has handlers sleep past their
// deadline and commit, deletes the Redis ledger and restarts PostgreSQL.
// After each: every balance is the sum of its payments and every payment
// is recorded once.

const (
	envWorker   = "NANDI_PGSINK_WORKER"
	envRedis    = "NANDI_PGSINK_REDIS"
	envPostgres = "NANDI_PGSINK_POSTGRES"
	envGroup    = "NANDI_PGSINK_GROUP"
	envSlow     = "NANDI_PGSINK_SLOW" // every Nth payment's effect sleeps past the deadline before it commits
)

const faultInterval = 300 * time.Millisecond

func TestMain(m *testing.M) {
	if os.Getenv(envWorker) != "" {
		os.Exit(worker())
	}
	goleak.VerifyTestMain(m, faultproxy.IgnoreLeaks()...)
}

// payments is the stream of payment tasks of group: key the payment's
// number, payload "account amount".
func payments(group string) string { return group + ":payments" }

func worker() int {
	group := os.Getenv(envGroup)
	slow, _ := strconv.Atoi(os.Getenv(envSlow))
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	client := redis.NewClient(&redis.Options{Addr: os.Getenv(envRedis)})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv(envPostgres))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer pool.Close()
	var s *pgsink.Sink
	for s == nil { // PostgreSQL may be restarting
		if s, err = pgsink.New(ctx, pool, pgsink.Options{Group: group, Logger: logger}); err != nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	lease, err := partition.New(client, partition.Options{Name: group, Interval: faultInterval, Logger: logger})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	src, _ := redisstream.New(client, payments(group), redisstream.Options{})
	var n atomic.Int64
	h := s.Handler(func(ctx context.Context, tx pgx.Tx, m *transport.Message) error {
		var account, amount int
		fmt.Sscan(string(m.Payload), &account, &amount)
		if slow > 0 && n.Add(1)%int64(slow) == 0 {
			time.Sleep(2 * faultInterval) // past the deadline, ignoring ctx, then commits
		}
		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", amount, account)
		return err
	})
	c, err := consumer.New(lease, src, h, consumer.Options{Concurrency: 4, CheckpointInterval: 50 * time.Millisecond, Logger: logger})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := c.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	st := s.Stats()
	fmt.Fprintf(os.Stderr, "stats: applied %d already-done %d fenced %d failed %d\n", st.Applied, st.AlreadyDone, st.Fenced, st.Failed)
	return 0
}

// sinkFleet is the worker processes of one fault scenario.
type sinkFleet struct {
	t      *testing.T
	rs     *redistest.Server
	pg     *pgtest.Server
	pool   *pgxpool.Pool
	group  string
	dir    string
	env    []string
	procs  map[int]*exec.Cmd
	done   map[int]chan struct{}
	next   int
	tasks  int
	expect map[int]int64 // account -> sum of its payments
}

const faultAccounts = 50

func newSinkFleet(t *testing.T, extra ...string) *sinkFleet {
	f := &sinkFleet{t: t, rs: redistest.Start(t), pg: pgtest.Start(t), group: strings.ReplaceAll(t.Name(), "/", "-"), dir: t.TempDir(),
		procs: map[int]*exec.Cmd{}, done: map[int]chan struct{}{}, expect: map[int]int64{}, env: extra}
	f.pool = pool(t, f.pg.URL())
	accountsTable(t, f.pool)
	t.Cleanup(func() {
		for id, p := range f.procs {
			_ = p.Process.Kill()
			<-f.done[id]
		}
	})
	return f
}

func accountsTable(t *testing.T, p *pgxpool.Pool) {
	t.Helper()
	if _, err := p.Exec(context.Background(), fmt.Sprintf(`CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);
		INSERT INTO accounts SELECT g, 0 FROM generate_series(0, %d) g`, faultAccounts-1)); err != nil {
		t.Fatal(err)
	}
}

func (f *sinkFleet) start() int {
	f.next++
	id := f.next
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), envWorker+"="+strconv.Itoa(id), envRedis+"="+f.rs.Addr(), envPostgres+"="+f.pg.URL(), envGroup+"="+f.group), f.env...)
	logf, _ := os.Create(filepath.Join(f.dir, fmt.Sprintf("worker-%d.log", id)))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(done) }()
	f.procs[id], f.done[id] = cmd, done
	return id
}

func (f *sinkFleet) kill(id int) {
	_ = f.procs[id].Process.Kill()
	<-f.done[id]
	delete(f.procs, id)
	delete(f.done, id)
}

func (f *sinkFleet) term(id int) {
	_ = f.procs[id].Process.Signal(syscall.SIGTERM)
	select {
	case <-f.done[id]:
	case <-time.After(60 * time.Second):
		f.t.Errorf("worker %d did not stop in 60s after SIGTERM", id)
		_ = f.procs[id].Process.Kill()
		<-f.done[id]
	}
	delete(f.procs, id)
	delete(f.done, id)
}

// produce adds n payments (payment i: account i % faultAccounts, amount
// i % 7 + 1) over about spread.
func (f *sinkFleet) produce(n int, spread time.Duration) chan struct{} {
	c := f.rs.Client()
	for i := f.tasks; i < f.tasks+n; i++ {
		f.expect[i%faultAccounts] += int64(i%7 + 1)
	}
	from := f.tasks
	f.tasks += n
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer c.Close()
		step := spread / time.Duration(max(n/50, 1))
		for i := from; i < from+n; i++ {
			c.XAdd(context.Background(), &redis.XAddArgs{Stream: payments(f.group), Values: []any{"id", i, "payload", fmt.Sprintf("%d %d", i%faultAccounts, i%7+1)}})
			if (i-from)%50 == 49 {
				time.Sleep(step)
			}
		}
	}()
	return done
}

// settle waits until every payment is recorded (or fails after limit),
// stops the workers cleanly, and checks the balances and the records.
func (f *sinkFleet) settle(limit time.Duration) {
	f.t.Helper()
	ctx := context.Background()
	recorded := func() int {
		var n int
		_ = f.pool.QueryRow(ctx, "SELECT count(*) FROM nandi_done WHERE grp = $1", f.group).Scan(&n)
		return n
	}
	deadline := time.Now().Add(limit)
	for recorded() < f.tasks && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(3 * faultInterval) // anything applied twice shows up now
	for id := range f.procs {
		f.term(id)
	}
	var n, dup int
	if err := f.pool.QueryRow(ctx, "SELECT count(*), count(*) - count(DISTINCT (shard, hi, lo)) FROM nandi_done WHERE grp = $1", f.group).Scan(&n, &dup); err != nil {
		f.t.Fatal(err)
	}
	wrong := 0
	rows, err := f.pool.Query(ctx, "SELECT id, balance FROM accounts")
	if err != nil {
		f.t.Fatal(err)
	}
	for rows.Next() {
		var id int
		var b int64
		_ = rows.Scan(&id, &b)
		if b != f.expect[id] {
			if wrong++; wrong <= 5 {
				f.t.Errorf("account %d: balance %d; want %d, the sum of its payments", id, b, f.expect[id])
			}
		}
	}
	rows.Close()
	if n != f.tasks || dup != 0 || wrong != 0 {
		f.t.Errorf("%d payments recorded (%d twice) of %d; %d balances wrong", n, dup, f.tasks, wrong)
	}
	stats := f.stats()
	f.t.Logf("figures: %s: %d payments, %d recorded once each, balances right: %v; surviving workers' sinks: %s", f.t.Name(), f.tasks, n, wrong == 0, stats)
}

// stats sums what the workers that stopped cleanly printed.
func (f *sinkFleet) stats() string {
	var applied, already, fenced int64
	files, _ := filepath.Glob(filepath.Join(f.dir, "worker-*.log"))
	for _, fn := range files {
		b, _ := os.ReadFile(fn)
		for _, line := range strings.Split(string(b), "\n") {
			var a, d, fe, fa int64
			if _, err := fmt.Sscanf(line, "stats: applied %d already-done %d fenced %d failed %d", &a, &d, &fe, &fa); err == nil {
				applied, already, fenced = applied+a, already+d, fenced+fe
			}
		}
	}
	return fmt.Sprintf("applied %d, already done %d, fenced %d", applied, already, fenced)
}

// scale is the payments of a scenario: 10 times as many with
// NANDI_CHAOS_SCALE=10 (make chaos).
func scale(n int) int {
	if k, err := strconv.Atoi(os.Getenv("NANDI_CHAOS_SCALE")); err == nil && k > 0 {
		return n * k
	}
	return n
}

// Workers killed -9 about every interval while payments come.
func TestSinkKill9(t *testing.T) {
	f := newSinkFleet(t)
	for range 3 {
		f.start()
	}
	produced := f.produce(scale(3000), 4*time.Second)
	for i := 0; i < 8; i++ {
		time.Sleep(faultInterval + time.Duration(i%3)*faultInterval/3)
		for id := range f.procs {
			f.kill(id)
			break
		}
		f.start()
	}
	<-produced
	f.settle(60 * time.Second)
}

// A worker paused (SIGSTOP) for longer than its lease, then resumed: its
// share moves on meanwhile; what it had in flight commits late or is
// refused.
func TestSinkPausePastTheLease(t *testing.T) {
	f := newSinkFleet(t)
	for range 3 {
		f.start()
	}
	produced := f.produce(scale(3000), 4*time.Second)
	for range 3 {
		time.Sleep(2 * faultInterval)
		for id, p := range f.procs {
			_ = p.Process.Signal(syscall.SIGSTOP)
			time.Sleep(4 * faultInterval)
			_ = p.Process.Signal(syscall.SIGCONT)
			_ = id
			break
		}
	}
	<-produced
	f.settle(60 * time.Second)
}

// Every 50th effect sleeps past its term's deadline, ignoring its
// context, and then commits, while the group changes around it.
func TestSinkHandlerPastItsDeadline(t *testing.T) {
	f := newSinkFleet(t, envSlow+"=50")
	for range 3 {
		f.start()
	}
	produced := f.produce(scale(2000), 4*time.Second)
	time.Sleep(3 * faultInterval)
	a := f.start()
	time.Sleep(4 * faultInterval)
	f.term(a)
	<-produced
	f.settle(90 * time.Second)
}

// The Redis ledger is deleted twice while payments are applied: workers
// read the stream again from where they last knew, and what was applied
// is refused as already done.
func TestSinkLedgerDeleted(t *testing.T) {
	f := newSinkFleet(t)
	for range 3 {
		f.start()
	}
	produced := f.produce(scale(3000), 4*time.Second)
	for range 2 {
		time.Sleep(5 * faultInterval)
		if err := f.rs.Client().Del(context.Background(), checkpoint.Key(f.group)).Err(); err != nil {
			t.Fatal(err)
		}
		// A worker restarted with no memory of the ledger reads from
		// the stream's start.
		for id := range f.procs {
			f.kill(id)
			break
		}
		f.start()
	}
	<-produced
	f.settle(90 * time.Second)
}

// PostgreSQL killed (-9) and restarted while payments are applied: the
// transactions in flight are lost whole (effect and record), and done
// again.
func TestSinkPostgresRestarted(t *testing.T) {
	f := newSinkFleet(t)
	for range 3 {
		f.start()
	}
	produced := f.produce(scale(3000), 4*time.Second)
	for range 2 {
		time.Sleep(4 * faultInterval)
		f.pg.Kill()
		time.Sleep(2 * faultInterval)
		f.pg.Restart()
	}
	<-produced
	f.settle(90 * time.Second)
}
