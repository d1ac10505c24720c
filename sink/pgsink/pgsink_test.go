package pgsink_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/pgtest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/sink/pgsink"
	"github.com/nandi-go/nandi/transport"
)

var pgSrv *pgtest.Server

// server starts one PostgreSQL for the package's tests that need not
// restart it.
func server(t *testing.T) *pgtest.Server {
	t.Helper()
	if pgSrv == nil {
		pgSrv = pgtest.Start(t)
		t.Cleanup(func() { pgSrv = nil })
	}
	return pgSrv
}

func pool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// accounts creates a table of n accounts at balance 0.
func accounts(t *testing.T, p *pgxpool.Pool, table string, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := p.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %[1]s; CREATE TABLE %[1]s (id int PRIMARY KEY, balance bigint NOT NULL);
		INSERT INTO %[1]s SELECT g, 0 FROM generate_series(0, %[2]d) g`, table, n-1)); err != nil {
		t.Fatal(err)
	}
}

func credit(table string) pgsink.Func {
	return func(ctx context.Context, tx pgx.Tx, m *transport.Message) error {
		_, err := tx.Exec(ctx, "UPDATE "+table+" SET balance = balance + 1 WHERE id = $1", m.Key)
		return err
	}
}

func balance(t *testing.T, p *pgxpool.Pool, table string, id int) int64 {
	t.Helper()
	var b int64
	if err := p.QueryRow(context.Background(), "SELECT balance FROM "+table+" WHERE id = $1", id).Scan(&b); err != nil {
		t.Fatal(err)
	}
	return b
}

func term(index, replicas int, token int64) context.Context {
	return consumer.ContextWithAssignment(context.Background(), partition.Assignment{Index: index, Replicas: replicas, Token: token})
}

func msg(key string, shard int, pos uint64) *transport.Message {
	return &transport.Message{Key: key, Shard: shard, Position: transport.Offset(pos)}
}

// A task applies once: the same task offered again (a redo after a crash,
// or by another worker) is AlreadyDone, whatever its term's token; and a
// handler whose term is older than one that has claimed the task's key
// (it outlived its term and commits late) is Fenced. Neither applies
// anything.
func TestOnceAlreadyDoneAndFenced(t *testing.T) {
	p := pool(t, server(t).URL())
	accounts(t, p, "acc1", 3)
	s, err := pgsink.New(context.Background(), p, pgsink.Options{Group: "once"})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler(credit("acc1"))
	if err := h(term(0, 1, 100), msg("1", 0, 10)); err != nil {
		t.Fatal(err)
	}
	if err := h(term(0, 1, 200), msg("1", 0, 10)); err != nil { // redone by a newer term
		t.Fatal(err)
	}
	// The newer term claims key 2's next task; the older one, late, tries
	// that task and a later one of the same key.
	if err := h(term(0, 1, 200), msg("2", 0, 11)); err != nil {
		t.Fatal(err)
	}
	if err := h(term(0, 1, 100), msg("2", 0, 12)); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if b1, b2 := balance(t, p, "acc1", 1), balance(t, p, "acc1", 2); b1 != 1 || b2 != 1 {
		t.Errorf("balances %d and %d; want 1 and 1", b1, b2)
	}
	if st.Applied != 2 || st.AlreadyDone != 1 || st.Fenced != 1 {
		t.Errorf("stats %+v; want 2 applied, 1 already done, 1 fenced", st)
	}
}

// An error from the effect rolls its task back and is returned (for the
// consumer's failure policy); the other tasks of its batch still commit,
// and the task applies when offered again.
func TestEffectErrorRollsBackOnlyItsTask(t *testing.T) {
	p := pool(t, server(t).URL())
	accounts(t, p, "acc2", 40)
	s, err := pgsink.New(context.Background(), p, pgsink.Options{Group: "errors"})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("card declined")
	var failOnce sync.Once
	h := s.Handler(func(ctx context.Context, tx pgx.Tx, m *transport.Message) error {
		if err := credit("acc2")(ctx, tx, m); err != nil {
			return err
		}
		fail := false
		if m.Key == "7" {
			failOnce.Do(func() { fail = true })
		}
		if fail {
			return boom
		}
		return nil
	})
	errs := concurrently(h, 40) // their effects share transactions
	for i, err := range errs {
		if (i == 7) != errors.Is(err, boom) {
			t.Errorf("task %d: %v", i, err)
		}
	}
	if err := h(term(0, 1, 5), msg("7", 0, 7)); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if b := balance(t, p, "acc2", i); b != 1 {
			t.Errorf("account %d: balance %d; want 1", i, b)
		}
	}
	if st := s.Stats(); st.Applied != 40 || st.Failed != 1 || st.Commits >= 40 {
		t.Errorf("stats %+v; want 40 applied, 1 failed, fewer commits than tasks (group commit)", st)
	}
}

// The handler needs a consumer's context: without a term it refuses.
func TestHandlerNeedsATerm(t *testing.T) {
	p := pool(t, server(t).URL())
	s, err := pgsink.New(context.Background(), p, pgsink.Options{Group: "noterm"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Handler(credit("x"))(context.Background(), msg("1", 0, 1)); !errors.Is(err, pgsink.ErrNotInConsumer) {
		t.Fatalf("handler without a term: %v; want ErrNotInConsumer", err)
	}
	if _, err := pgsink.New(context.Background(), p, pgsink.Options{}); err == nil {
		t.Fatal("New without a Group: no error")
	}
}
