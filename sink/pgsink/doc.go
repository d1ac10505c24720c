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
// handler runs under a consumer: each call queues its task; a handler
// that finds no batch running leads one (group commit): a transaction
// that takes every queued task (up to MaxBatch), claims them all in the
// round trip that begins it, runs their effects one after another, each
// in a savepoint of its own (sent with the effect's first statement, so
// the savepoint costs no round trip of its own), and commits. As its commit
// goes to disk, the next waiting handler leads the next batch. Batches
// run effects one at a time, since two running at once wait on each
// other's rows; a batch whose claim or effect has run longer than
// BatchWindow no longer holds the next one back, so a slow effect holds
// only the tasks of its batch.
//
// # Guarantees
//
//   - Once: a task (its log's shard and position) is recorded as done in
//     the transaction of its effect. A task offered again (after a crash,
//     a lost ledger, a handover) finds the record and applies nothing
//     (Stats.AlreadyDone). Records are forgotten only below a watermark
//     kept in PostgreSQL (nandi_low), which answers for them: the group's
//     low watermark, copied from its checkpoint ledger (Options.
//     Checkpoints), never lowered, and forgotten below only ForgetEvery
//     (at least BatchTimeout: New refuses less) after that raise
//     committed. Without Options.Checkpoints every record is kept.
//   - Fenced: each key has a fence row holding the newest term's token
//     (consumer.AssignmentFromContext). A handler whose term is older than
//     the one that last claimed the key applies nothing (Stats.Fenced); the
//     row stays locked until its transaction ends, so a newer term's claim
//     waits for a late commit and then finds the task done.
//   - Failure is the task's own: an error from its effect (or a panic)
//     rolls back its savepoint and its record and goes to the consumer's
//     failure policy (Stats.Failed); no other task's effect runs again. An
//     effect that returns nil after one of its statements failed (the
//     transaction is then aborted) fails the same way, with an error that
//     says so. A task that a deadlock rolls back runs again in a later
//     batch (Stats.Conflicts). A batch whose claim fails for one task's
//     sake (a key PostgreSQL cannot store) claims each task in a
//     transaction of its own, and only that task fails. A batch refused at
//     COMMIT (a deferred constraint or trigger) runs again one task per
//     transaction (Stats.Isolated), so that only the task that caused it
//     fails. An error of the transaction itself (a lost connection,
//     BatchTimeout) fails its tasks, which the consumer retries
//     (Stats.BatchErrors).
//   - The transaction an effect is given is the batch's: its Commit and
//     Rollback return ErrEffectEndsTx. Return an error to roll the task
//     back.
//   - The handler returns nil once the task's transaction has committed,
//     or the task was refused: that commit is the effect's boundary.
//
// An effect may run more than once: a transaction that does not commit
// (a crash, a lost connection, a deadlock at COMMIT, a batch refused at
// COMMIT) runs its tasks' effects again. Only what an effect does through
// tx counts and commits once; anything else it does (a call to another
// service, a counter in memory) must bear repeating.
//
// # What it assumes
//
// A log source (its messages carry shards and positions: Redis Streams,
// Kafka, JetStream, the memory log). Every statement of the effect uses
// the transaction it is given. Every worker of the group has a
// ForgetEvery at least every worker's BatchTimeout (the same options
// everywhere do). A log that is deleted and created again
// starts its positions over: delete the group's rows of the sink's tables
// with it, or the new log's tasks are found done. The fault suite
// (chaos_test.go, on a real PostgreSQL and redis-server) and
// docs/PROTOCOL.md ("Exactly-once effects") say why nothing is applied
// twice and nothing is skipped.
package pgsink
