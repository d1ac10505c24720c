package pgsink_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/sink/pgsink"
	"github.com/nandi-go/nandi/transport"
)

// concurrently runs h for tasks 0..n-1 (key i, shard 0, position i) at
// once, so that they share batches, and returns each one's error.
func concurrently(h func(context.Context, *transport.Message) error, n int) []error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = h(term(0, 1, 5), msg(fmt.Sprint(i), 0, uint64(i))) })
	}
	wg.Wait()
	return errs
}

// An effect's error rolls back that task alone: no other task's effect
// runs again (each runs in a savepoint of its own). Before, every task of
// the batch ahead of the failing one ran twice.
func TestEffectErrorRunsNoOtherEffectAgain(t *testing.T) {
	p := pool(t, server(t).URL())
	accounts(t, p, "acc6", 40)
	s, err := pgsink.New(context.Background(), p, pgsink.Options{Group: "rerun"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := map[string]int{}
	boom := errors.New("card declined")
	h := s.Handler(func(ctx context.Context, tx pgx.Tx, m *transport.Message) error {
		mu.Lock()
		calls[m.Key]++
		mu.Unlock()
		if err := credit("acc6")(ctx, tx, m); err != nil {
			return err
		}
		if m.Key == "7" || m.Key == "23" {
			return boom
		}
		return nil
	})
	for round := range 3 {
		clear(calls)
		if _, err := p.Exec(context.Background(), "UPDATE acc6 SET balance = 0; DELETE FROM nandi_done WHERE grp = 'rerun'"); err != nil {
			t.Fatal(err)
		}
		errs := concurrently(h, 40)
		for i, err := range errs {
			if failing := i == 7 || i == 23; failing != errors.Is(err, boom) {
				t.Errorf("round %d, task %d: %v", round, i, err)
			}
			if c := calls[fmt.Sprint(i)]; c != 1 {
				t.Errorf("round %d, task %d: its effect ran %d times; want once", round, i, c)
			}
			want := int64(1)
			if i == 7 || i == 23 {
				want = 0
			}
			if b := balance(t, p, "acc6", i); b != want {
				t.Errorf("round %d, account %d: balance %d; want %d", round, i, b, want)
			}
		}
	}
	if st := s.Stats(); st.Commits >= 3*38 {
		t.Errorf("stats %+v: a commit per task; want batches", st)
	}
}

// An error that shows only at COMMIT (a deferred foreign key) fails the
// task that caused it alone: the batch's tasks run again one per
// transaction, the innocent ones apply, and only the culprit meets the
// failure policy. Before, every task of its batch got its error.
func TestCommitErrorFailsOnlyItsCulprit(t *testing.T) {
	p := pool(t, server(t).URL())
	ctx := context.Background()
	if _, err := p.Exec(ctx, `DROP TABLE IF EXISTS child, parent; CREATE TABLE parent (id int PRIMARY KEY);
		INSERT INTO parent VALUES (1);
		CREATE TABLE child (id int PRIMARY KEY, parent int REFERENCES parent DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	s, err := pgsink.New(ctx, p, pgsink.Options{Group: "deferred"})
	if err != nil {
		t.Fatal(err)
	}
	const culprit = 13
	h := s.Handler(func(ctx context.Context, tx pgx.Tx, m *transport.Message) error {
		parent := 1
		if m.Key == fmt.Sprint(culprit) {
			parent = 2 // no such parent: refused at COMMIT
		}
		_, err := tx.Exec(ctx, "INSERT INTO child VALUES ($1, $2)", m.Key, parent)
		return err
	})
	errs := concurrently(h, 20)
	for i, err := range errs {
		var pe *pgconn.PgError
		if i == culprit {
			if !errors.As(err, &pe) || pe.Code != "23503" {
				t.Errorf("the culprit: %v; want its foreign key violation", err)
			}
		} else if err != nil {
			t.Errorf("innocent task %d: %v", i, err)
		}
	}
	var n int
	if err := p.QueryRow(ctx, "SELECT count(*) FROM child").Scan(&n); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if n != 19 || st.Applied != 19 || st.Failed != 1 {
		t.Errorf("%d children, stats %+v; want the 19 innocent tasks applied, the culprit failed", n, st)
	}
	t.Logf("figures: 20 tasks, one refused at COMMIT by a deferred constraint: %d batches run again one task per transaction; 19 applied, 1 failed", st.Isolated)
}

// An effect that swallows a statement's error and returns nil leaves the
// transaction aborted: that task fails with an error that says so, and
// the others of its batch commit. As the last task of its batch too.
func TestSwallowedStatementErrorFailsOnlyItsTask(t *testing.T) {
	p := pool(t, server(t).URL())
	accounts(t, p, "acc7", 30)
	s, err := pgsink.New(context.Background(), p, pgsink.Options{Group: "swallowed"})
	if err != nil {
		t.Fatal(err)
	}
	var sloppy atomic.Bool
	h := s.Handler(func(ctx context.Context, tx pgx.Tx, m *transport.Message) error {
		if err := credit("acc7")(ctx, tx, m); err != nil {
			return err
		}
		if m.Key == "5" && sloppy.Load() {
			_, _ = tx.Exec(ctx, "SELECT 1 / 0") // its error dropped
		}
		return nil
	})
	sloppy.Store(true)
	if err := h(term(0, 1, 5), msg("5", 0, 5)); err == nil || !strings.Contains(err.Error(), "aborted the transaction") {
		t.Fatalf("alone: %v; want the swallowed error's report", err)
	}
	errs := concurrently(h, 30)
	for i, err := range errs {
		if (i == 5) != (err != nil) {
			t.Errorf("task %d: %v", i, err)
		}
	}
	sloppy.Store(false)
	if err := h(term(0, 1, 5), msg("5", 0, 5)); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if b := balance(t, p, "acc7", i); b != 1 {
			t.Errorf("account %d: balance %d; want 1", i, b)
		}
	}
}

// Options that would let a record be forgotten under a claim that cannot
// see the watermark are refused, naming them.
func TestOptionsThatBreakOnceAreRefused(t *testing.T) {
	p := pool(t, server(t).URL())
	for _, c := range []struct {
		opts pgsink.Options
		want []string
	}{
		{pgsink.Options{Group: "g", ForgetEvery: 100 * time.Millisecond, BatchTimeout: time.Second}, []string{"ForgetEvery", "BatchTimeout"}},
		{pgsink.Options{Group: "g", ForgetEvery: time.Second}, []string{"ForgetEvery", "BatchTimeout", "10s"}}, // the default BatchTimeout
		{pgsink.Options{Group: "g", MaxBatch: 65}, []string{"MaxBatch", "64"}},
	} {
		_, err := pgsink.New(context.Background(), p, c.opts)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("New(%+v): %v; want an error naming %s", c.opts, err, w)
			}
		}
	}
}

// A claim held on its key's fence row (another term's transaction holds
// it) while another worker's sink raises the watermark past its task and
// forgets the task's record: the claim, whose statement began before the
// raise committed and so cannot see it, must not find the record gone and
// apply the task again. Here the raise itself is slow (another
// transaction holds the watermark's row) and the claim begins while it
// waits: the forget must count ForgetEvery from the raise's commit, not
// from when it began (before, the task applied twice), and ForgetEvery is
// at least BatchTimeout, so the claim has ended by then.
func TestClaimHeldPastAForgetAppliesNothing(t *testing.T) {
	rs := redistest.Start(t)
	ctx := context.Background()
	// Room for both sinks, the two held transactions and the watcher: a
	// pool this test exhausted would time its steps, not the sinks.
	cfg, err := pgxpool.ParseConfig(server(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	accounts(t, p, "acc8", 1)
	const group = "heldclaim"
	ledger := checkpoint.NewRedis(rs.Client(), group)
	st, err := ledger.Open(ctx, checkpoint.OpenRequest{Replicas: 1, Index: 0, Token: 1, Origin: []transport.Position{transport.Offset(0)}})
	if err != nil {
		t.Fatal(err)
	}
	const every = time.Second
	opts := pgsink.Options{Group: group, BatchTimeout: every, ForgetEvery: every}
	a, err := pgsink.New(ctx, p, opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Checkpoints = ledger
	b, err := pgsink.New(ctx, p, opts)
	if err != nil {
		t.Fatal(err)
	}
	credit0 := func(ctx context.Context, tx pgx.Tx, m *transport.Message) error {
		_, err := tx.Exec(ctx, "UPDATE acc8 SET balance = balance + 1 WHERE id = 0")
		return err
	}
	ha, hb := a.Handler(credit0), b.Handler(func(context.Context, pgx.Tx, *transport.Message) error { return nil })
	pos := uint64(100)
	other := func() { // a task of b's: its batch ends in a forget
		pos++
		if err := hb(term(0, 1, 10), msg("other", 0, pos)); err != nil {
			t.Error(err)
		}
	}
	waiting := func(what, table string) {
		redistest.WaitFor(t, 10*time.Second, what, func() bool {
			var n int
			_ = p.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%"+table+"%'").Scan(&n)
			return n == 1
		})
	}
	task := msg("k", 0, 5)
	if err := ha(term(0, 1, 10), task); err != nil {
		t.Fatal(err)
	}
	other() // b's first forget raises the watermark to the ledger's 0
	// The group's low watermark passes the task.
	if err := ledger.Write(ctx, checkpoint.WriteRequest{Epoch: st.Current.N, Token: 1, Index: 0, Replicas: 1,
		Marks: map[int]checkpoint.Mark{0: {Low: transport.Offset(10), High: transport.Offset(10)}}}); err != nil {
		t.Fatal(err)
	}
	// Another term's open transaction holds the key's fence row, and
	// another holds the watermark's row, so that b's next raise waits.
	hold := func(query string) pgx.Tx {
		tx, err := p.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		if _, err := tx.Exec(ctx, query, group); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	fence := hold("SELECT 1 FROM nandi_fence WHERE grp = $1 AND key = 'k' FOR UPDATE")
	low := hold("SELECT 1 FROM nandi_low WHERE grp = $1 FOR UPDATE")
	time.Sleep(every)
	raised := make(chan struct{})
	go func() { other(); close(raised) }() // its forget begins, and its raise waits
	waiting("b's raise waiting on the watermark's row", "nandi_low")
	time.Sleep(every / 2)
	// The task offered again (a lost ledger restarts below it): its claim
	// begins before the raise commits, and waits on the fence row.
	again := make(chan error, 1)
	go func() { again <- ha(term(0, 1, 10), task) }()
	waiting("the claim waiting on the fence row", "nandi_fence")
	_ = low.Rollback(ctx)
	<-raised
	// b forgets below the raised watermark, a ForgetEvery after the raise.
	redistest.WaitFor(t, 20*time.Second, "the record forgotten", func() bool {
		other()
		return b.Stats().Forgotten > 0
	})
	_ = fence.Rollback(ctx)
	err = <-again
	t.Logf("the held claim: %v", err)
	if err != nil { // its batch outlived BatchTimeout: the consumer retries it
		if err := ha(term(0, 1, 10), task); err != nil {
			t.Fatal(err)
		}
	}
	if bal := balance(t, p, "acc8", 0); bal != 1 {
		t.Fatalf("balance %d; want 1: the task applied %d times", bal, bal)
	}
}

// A slow effect holds no task outside its batch: tasks that arrive while
// it runs commit in batches of their own, and it commits when it ends.
// Before, every handler of the sink waited for it.
func TestSlowEffectHoldsNoOtherTask(t *testing.T) {
	p := pool(t, server(t).URL())
	accounts(t, p, "acc9", 21)
	s, err := pgsink.New(context.Background(), p, pgsink.Options{Group: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	h := s.Handler(func(ctx context.Context, tx pgx.Tx, m *transport.Message) error {
		if m.Key == "20" {
			close(started)
			<-release
		}
		return credit("acc9")(ctx, tx, m)
	})
	slow := make(chan error, 1)
	go func() { slow <- h(term(0, 1, 5), msg("20", 0, 20)) }()
	<-started
	others := make(chan []error, 1)
	go func() { others <- concurrently(h, 20) }()
	select {
	case errs := <-others:
		for i, err := range errs {
			if err != nil {
				t.Errorf("task %d: %v", i, err)
			}
		}
	case <-time.After(60 * time.Second):
		close(release)
		t.Fatal("tasks that arrived after a slow effect waited for it (60s)")
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	for i := range 21 {
		if b := balance(t, p, "acc9", i); b != 1 {
			t.Errorf("account %d: balance %d; want 1", i, b)
		}
	}
}

// Batches run their effects one at a time, so effects that take the same
// rows in crossing orders never deadlock across batches: a batch waits
// at most for the commit of the one before. Before, two batches took
// tasks at once and each held the rows it updated until its commit;
// effects crossing them deadlocked (PostgreSQL finds one after
// deadlock_timeout, 1s, and rolls a task back), the sink's speed fell
// with more concurrency (issue 50). BatchWindow is long here so that no
// effect, however slow the machine, lets a second batch start.
func TestBatchesCrossingRowsNeverDeadlock(t *testing.T) {
	p := pool(t, server(t).URL())
	accounts(t, p, "acc13", 10)
	s, err := pgsink.New(context.Background(), p, pgsink.Options{Group: "crossing", BatchWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// each task moves one unit between two of ten accounts, in its own order
	move := func(i uint64) (from, to uint64) { return i % 10, (i*7 + 3) % 10 }
	h := s.Handler(func(ctx context.Context, tx pgx.Tx, m *transport.Message) error {
		from, to := move(m.Position.Lo)
		if _, err := tx.Exec(ctx, "UPDATE acc13 SET balance = balance - 1 WHERE id = $1", from); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE acc13 SET balance = balance + 1 WHERE id = $1", to)
		return err
	})
	const n = 300
	for i, err := range concurrently(h, n) {
		if err != nil {
			t.Errorf("task %d: %v", i, err)
		}
	}
	if st := s.Stats(); st.Conflicts != 0 || st.Applied != n {
		t.Errorf("stats %+v; want %d applied and no deadlock", st, n)
	}
	want := make([]int64, 10)
	for i := range uint64(n) {
		from, to := move(i)
		want[from]--
		want[to]++
	}
	for id := range 10 {
		if b := balance(t, p, "acc13", id); b != want[id] {
			t.Errorf("account %d: balance %d; want %d", id, b, want[id])
		}
	}
}

// A connection lost in the middle of a batch fails every task of the
// batch, the ones whose effects had not run yet included, and each
// applies once when the consumer retries it; the batch's tasks found done
// before are answered too. Before, the tasks after the one that lost it
// were never answered: their handlers waited forever.
func TestALostConnectionFailsEveryTaskOfItsBatch(t *testing.T) {
	p := pool(t, server(t).URL())
	accounts(t, p, "acc14", 40)
	s, err := pgsink.New(context.Background(), p, pgsink.Options{Group: "lostconn"})
	if err != nil {
		t.Fatal(err)
	}
	var killed atomic.Bool
	h := s.Handler(func(ctx context.Context, tx pgx.Tx, m *transport.Message) error {
		if err := credit("acc14")(ctx, tx, m); err != nil {
			return err
		}
		if m.Key == "5" && killed.CompareAndSwap(false, true) {
			_, err := tx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
			return err
		}
		return nil
	})
	for i := 30; i < 40; i++ { // done before: refused in the batch, answered too
		if err := h(term(0, 1, 5), msg(fmt.Sprint(i), 0, uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	answered := make(chan []error, 1)
	go func() { answered <- concurrently(h, 40) }()
	var errs []error
	select {
	case errs = <-answered:
	case <-time.After(time.Minute):
		t.Fatal("a batch's tasks were never answered after it lost its connection (1 minute)")
	}
	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			if err := h(term(0, 1, 5), msg(fmt.Sprint(i), 0, uint64(i))); err != nil { // the consumer's retry
				t.Errorf("task %d, retried: %v", i, err)
			}
		}
	}
	if failed == 0 {
		t.Error("no task failed: the connection was not lost")
	}
	for i := range 40 {
		if b := balance(t, p, "acc14", i); b != 1 {
			t.Errorf("account %d: balance %d; want 1", i, b)
		}
	}
	t.Logf("%d tasks failed with their batch and applied once when retried", failed)
}
