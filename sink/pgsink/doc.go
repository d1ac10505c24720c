// Package pgsink applies each task's effect to PostgreSQL exactly once,
// whatever happens to the workers: kill -9, a pause past the lease, a
// handler that outlives its term, a lost Redis ledger, a clean handover.
// The effect and the record that the task is done commit in one
// transaction, and that transaction commits only if the task was never
// done before and no newer term has claimed its key.
//
//	pool, _ := pgxpool.New(ctx, "postgres://...")
//	sink, _ := pgsink.New(ctx, pool, pgsink.Options{Group: "payments"}) // creates its tables if missing
//	h := sink.Handler(func(ctx context.Context, tx pgx.Tx, m *transport.Message) error {
//		_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + $1 WHERE id = $2`, amount(m), account(m))
//		return err
//	})
//	c, _ := consumer.New(lease, source, h, consumer.Options{Concurrency: 8})
//
// It is a module of its own (github.com/nandi-go/nandi/sink/pgsink), so
// that users of nandi who never import it do not fetch pgx.
//
// # Lifecycle
//
// New creates the tables (nandi_done, nandi_fence, nandi_low, in
// Options.Schema) and does nothing else; the Sink starts no goroutine. Its
// handler runs under a consumer: each call queues its task; the first
// handler to find no batch running leads, committing the queued tasks of
// concurrent handlers together, one transaction per batch (group commit),
// and hands the lead on when its own task is done.
//
// # Guarantees
//
//   - Once: a task (its log's shard and position) is recorded as done in
//     the transaction of its effect. A task offered again (after a crash,
//     a lost ledger, a handover) finds the record and applies nothing
//     (Stats.AlreadyDone). Records are forgotten only below a watermark
//     kept in PostgreSQL (nandi_low), which answers for them: the group's
//     low watermark, copied from its checkpoint ledger (Options.
//     Checkpoints), never lowered. Without Options.Checkpoints every
//     record is kept.
//   - Fenced: each key has a fence row holding the newest term's token
//     (consumer.AssignmentFromContext). A handler whose term is older than
//     the one that last claimed the key applies nothing (Stats.Fenced); the
//     row stays locked until its transaction ends, so a newer term's claim
//     waits for a late commit and then finds the task done.
//   - Failure: an error from the effect rolls back its task only (the
//     batch is run again without it) and goes to the consumer's failure
//     policy. A transaction aborted by a deadlock or a serialization
//     failure is run again whole (Stats.Conflicts); any other error of the
//     transaction fails its tasks, which the consumer retries.
//   - The handler returns nil once the task's transaction has committed,
//     or the task was refused: that commit is the effect's boundary.
//
// # What it assumes
//
// A log source (its messages carry shards and positions: Redis Streams,
// Kafka, JetStream, the memory log). Every statement of the effect uses
// the transaction it is given. A log that is deleted and created again
// starts its positions over: delete the group's rows of the sink's tables
// with it, or the new log's tasks are found done. The fault suite
// (chaos_test.go, on a real PostgreSQL and redis-server) and
// docs/PROTOCOL.md ("Exactly-once effects") say why nothing is applied
// twice and nothing is skipped.
package pgsink
