package pgsink

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// effectTx is the transaction an effect is given: the batch's, with the
// task's savepoint opened in the same round trip as the effect's first
// statement (a batch of the two), so that a task costs one round trip
// more than its own statements only when its first statement cannot be
// sent in a batch (no arguments, a QueryExecMode, a QueryRewriter: it
// goes first on its own). The effect may not end the transaction: the
// sink commits it with the task's record.
type effectTx struct {
	pgx.Tx
	ctx   context.Context // the batch's, for LargeObjects and Conn
	saved bool            // the task's savepoint exists
}

// ErrEffectEndsTx is returned by Commit and Rollback of the transaction
// an effect is given.
var ErrEffectEndsTx = errors.New("pgsink: an effect may not commit or roll back its transaction: the sink commits it with the task's record; return an error to roll the task back")

func (e *effectTx) save(ctx context.Context) error {
	if e.saved {
		return nil
	}
	if _, err := e.Tx.Exec(ctx, "SAVEPOINT "+savepoint); err != nil {
		return err
	}
	e.saved = true
	return nil
}

// batched reports whether a statement with args goes in a batch with the
// savepoint as it would alone: it has arguments (without them pgx uses
// the simple protocol, which allows several statements in one string)
// and no option a batch treats otherwise.
func batched(args []any) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0].(type) {
	case pgx.QueryExecMode, pgx.QueryRewriter:
		return false
	}
	return true
}

// withSavepoint sends the savepoint and then the statement, and reads
// the savepoint's result.
func (e *effectTx) withSavepoint(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT " + savepoint)
	b.Queue(sql, args...)
	br := e.Tx.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	e.saved = true
	return br, nil
}

func (e *effectTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if e.saved || !batched(args) {
		if err := e.save(ctx); err != nil {
			return pgconn.CommandTag{}, err
		}
		return e.Tx.Exec(ctx, sql, args...)
	}
	br, err := e.withSavepoint(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (e *effectTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if e.saved || !batched(args) {
		if err := e.save(ctx); err != nil {
			return nil, err
		}
		return e.Tx.Query(ctx, sql, args...)
	}
	br, err := e.withSavepoint(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (e *effectTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if e.saved || !batched(args) {
		if err := e.save(ctx); err != nil {
			return errRow{err}
		}
		return e.Tx.QueryRow(ctx, sql, args...)
	}
	br, err := e.withSavepoint(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return &batchRow{row: br.QueryRow(), br: br}
}

func (e *effectTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if e.saved || len(b.QueuedQueries) == 0 {
		return e.Tx.SendBatch(ctx, b)
	}
	// The savepoint goes first in the same batch; the caller reads its
	// own queries' results (and their callbacks run) as they would.
	with := &pgx.Batch{QueuedQueries: append([]*pgx.QueuedQuery{{SQL: "SAVEPOINT " + savepoint}}, b.QueuedQueries...)}
	br := e.Tx.SendBatch(ctx, with)
	if _, err := br.Exec(); err == nil {
		e.saved = true
	}
	return br
}

func (e *effectTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := e.save(ctx); err != nil {
		return 0, err
	}
	return e.Tx.CopyFrom(ctx, table, columns, src)
}

func (e *effectTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := e.save(ctx); err != nil {
		return nil, err
	}
	return e.Tx.Prepare(ctx, name, sql)
}

func (e *effectTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := e.save(ctx); err != nil {
		return nil, err
	}
	return e.Tx.Begin(ctx)
}

// LargeObjects and Conn give ways to run statements that bypass the
// savepoint's batching: the savepoint is opened first (an error leaves
// the transaction aborted, which fails the task).
func (e *effectTx) LargeObjects() pgx.LargeObjects {
	_ = e.save(e.ctx)
	return e.Tx.LargeObjects()
}

func (e *effectTx) Conn() *pgx.Conn {
	_ = e.save(e.ctx)
	return e.Tx.Conn()
}

func (e *effectTx) Commit(context.Context) error   { return ErrEffectEndsTx }
func (e *effectTx) Rollback(context.Context) error { return ErrEffectEndsTx }

// batchRow is a row read from the batch that opened the savepoint: the
// batch is closed once the row is scanned.
type batchRow struct {
	row pgx.Row
	br  pgx.BatchResults
}

func (r *batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// batchRows are rows read from the batch that opened the savepoint: the
// batch is closed with them (when Next finds no more, or Close).
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if !r.closed {
		r.closed = true
		r.err = r.br.Close()
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}
