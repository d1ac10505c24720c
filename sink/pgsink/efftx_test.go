package pgsink_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nandi-go/nandi/sink/pgsink"
	"github.com/nandi-go/nandi/transport"
)

// Whatever way an effect runs its statements (Exec with and without
// arguments, named arguments, Query, QueryRow, SendBatch, CopyFrom, a
// nested transaction, the connection itself), a failing task's
// statements roll back and the others of its batch commit: the task's
// savepoint is open before its first statement, however that statement
// is sent.
func TestEveryWayOfRunningStatementsRollsBackWithItsTask(t *testing.T) {
	ctx := context.Background()
	p := pool(t, server(t).URL())
	ways := map[string]func(ctx context.Context, tx pgx.Tx, id int) error{
		"Exec": func(ctx context.Context, tx pgx.Tx, id int) error {
			_, err := tx.Exec(ctx, "INSERT INTO ways VALUES ($1)", id)
			return err
		},
		"Exec without arguments": func(ctx context.Context, tx pgx.Tx, id int) error {
			_, err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO ways VALUES (%d); SELECT 1", id))
			return err
		},
		"Exec with named arguments": func(ctx context.Context, tx pgx.Tx, id int) error {
			_, err := tx.Exec(ctx, "INSERT INTO ways VALUES (@id)", pgx.NamedArgs{"id": id})
			return err
		},
		"Exec in simple protocol": func(ctx context.Context, tx pgx.Tx, id int) error {
			_, err := tx.Exec(ctx, "INSERT INTO ways VALUES ($1)", pgx.QueryExecModeSimpleProtocol, id)
			return err
		},
		"QueryRow": func(ctx context.Context, tx pgx.Tx, id int) error {
			var got int
			if err := tx.QueryRow(ctx, "INSERT INTO ways VALUES ($1) RETURNING id", id).Scan(&got); err != nil {
				return err
			}
			if got != id {
				return fmt.Errorf("QueryRow read %d, want %d", got, id)
			}
			return nil
		},
		"Query": func(ctx context.Context, tx pgx.Tx, id int) error {
			rows, err := tx.Query(ctx, "INSERT INTO ways VALUES ($1), ($1 + 100000) RETURNING id", id)
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
			if err == nil && len(ids) != 2 {
				err = fmt.Errorf("Query read %v", ids)
			}
			return err
		},
		"SendBatch": func(ctx context.Context, tx pgx.Tx, id int) error {
			b := &pgx.Batch{}
			b.Queue("INSERT INTO ways VALUES ($1)", id)
			b.Queue("INSERT INTO ways VALUES ($1)", id+100000)
			return tx.SendBatch(ctx, b).Close()
		},
		"CopyFrom": func(ctx context.Context, tx pgx.Tx, id int) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"ways"}, []string{"id"}, pgx.CopyFromRows([][]any{{id}}))
			return err
		},
		"a nested transaction": func(ctx context.Context, tx pgx.Tx, id int) error {
			return pgx.BeginFunc(ctx, tx, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "INSERT INTO ways VALUES ($1)", id)
				return err
			})
		},
		"the connection": func(ctx context.Context, tx pgx.Tx, id int) error {
			_, err := tx.Conn().Exec(ctx, "INSERT INTO ways VALUES ($1)", id)
			return err
		},
	}
	boom := errors.New("declined")
	for name, way := range ways {
		t.Run(name, func(t *testing.T) {
			if _, err := p.Exec(ctx, "DROP TABLE IF EXISTS ways; CREATE TABLE ways (id int PRIMARY KEY)"); err != nil {
				t.Fatal(err)
			}
			s, err := pgsink.New(ctx, p, pgsink.Options{Group: "ways " + name})
			if err != nil {
				t.Fatal(err)
			}
			h := s.Handler(func(ctx context.Context, tx pgx.Tx, m *transport.Message) error {
				var id int
				fmt.Sscan(m.Key, &id)
				if err := way(ctx, tx, id); err != nil {
					return err
				}
				if id%5 == 3 {
					return boom // after its statements ran
				}
				return nil
			})
			errs := concurrently(h, 20)
			for i, err := range errs {
				if (i%5 == 3) != errors.Is(err, boom) {
					t.Errorf("task %d: %v", i, err)
				}
			}
			rows, err := p.Query(ctx, "SELECT id FROM ways WHERE id < 100000 ORDER BY id")
			if err != nil {
				t.Fatal(err)
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[int])
			if err != nil {
				t.Fatal(err)
			}
			var want []int
			for i := range 20 {
				if i%5 != 3 {
					want = append(want, i)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("rows %v; want %v (the failing tasks' rolled back, every other task's kept)", got, want)
			}
			if st := s.Stats(); st.Applied != 16 || st.Failed != 4 {
				t.Errorf("stats %+v; want 16 applied, 4 failed", st)
			}
		})
	}
}

// The transaction is the sink's: an effect that commits or rolls it back
// is refused, and the task is not applied.
func TestAnEffectCannotEndItsTransaction(t *testing.T) {
	ctx := context.Background()
	p := pool(t, server(t).URL())
	accounts(t, p, "acc10", 2)
	s, err := pgsink.New(ctx, p, pgsink.Options{Group: "ends"})
	if err != nil {
		t.Fatal(err)
	}
	for i, end := range []func(pgx.Tx) error{
		func(tx pgx.Tx) error { return tx.Commit(ctx) },
		func(tx pgx.Tx) error { return tx.Rollback(ctx) },
	} {
		h := s.Handler(func(ctx context.Context, tx pgx.Tx, m *transport.Message) error {
			if err := credit("acc10")(ctx, tx, m); err != nil {
				return err
			}
			return end(tx)
		})
		if err := h(term(0, 1, 5), msg(fmt.Sprint(i), 0, uint64(i))); !errors.Is(err, pgsink.ErrEffectEndsTx) {
			t.Errorf("effect %d: %v; want ErrEffectEndsTx", i, err)
		}
		if b := balance(t, p, "acc10", i); b != 0 {
			t.Errorf("account %d: balance %d; want 0", i, b)
		}
	}
}

// A batch costs one round trip to begin and claim its tasks, one per
// task for its savepoint and its effect's one statement, and one to
// commit: the savepoint goes with the effect's first statement.
func TestATaskCostsOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(server(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	var trips atomic.Int64
	cfg.ConnConfig.Tracer = tripCounter{&trips}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	accounts(t, p, "acc11", 64)
	s, err := pgsink.New(ctx, p, pgsink.Options{Group: "trips"})
	if err != nil {
		t.Fatal(err)
	}
	trips.Store(0)
	for i, err := range concurrently(s.Handler(credit("acc11")), 64) {
		if err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
	}
	st := s.Stats()
	if want := 64 + 2*st.Commits; trips.Load() != want {
		t.Errorf("%d round trips for 64 tasks in %d batches; want %d (one per task, two per batch)", trips.Load(), st.Commits, want)
	}
}

// tripCounter counts the statements and batches a connection sends.
type tripCounter struct{ n *atomic.Int64 }

func (c tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (tripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// A task whose claim PostgreSQL refuses (a key it cannot store: text
// with a NUL byte) fails alone: its batch's other tasks apply.
func TestAKeyPostgresRefusesFailsOnlyItsTask(t *testing.T) {
	p := pool(t, server(t).URL())
	accounts(t, p, "acc12", 10)
	s, err := pgsink.New(context.Background(), p, pgsink.Options{Group: "badkey"})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler(func(ctx context.Context, tx pgx.Tx, m *transport.Message) error {
		_, err := tx.Exec(ctx, "UPDATE acc12 SET balance = balance + 1 WHERE id = $1", m.Position.Lo)
		return err
	})
	errs := concurrently(func(ctx context.Context, m *transport.Message) error {
		if m.Key == "4" {
			m.Key = "4\x00"
		}
		return h(ctx, m)
	}, 10)
	for i, err := range errs {
		var pe *pgconn.PgError
		if i == 4 {
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), "recording") {
				t.Errorf("the bad key: %v; want PostgreSQL's refusal of its record", err)
			}
		} else if err != nil {
			t.Errorf("task %d: %v", i, err)
		}
		want := int64(1)
		if i == 4 {
			want = 0
		}
		if b := balance(t, p, "acc12", i); b != want {
			t.Errorf("account %d: balance %d; want %d", i, b, want)
		}
	}
}
