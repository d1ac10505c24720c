// Package consumer pairs a transport.Source with a partition.Lease and the
// filter id % Replicas == Index: every worker of a group reads every
// message and handles the ones its lease owns, in order per id, with
// Concurrency handlers at once, and hands its share over without doing
// work twice.
//
//	lease, _ := partition.New(redisClient, partition.Options{Name: "mail-sender"})
//	c, _ := consumer.New(lease, source, send, consumer.Options{Concurrency: 16})
//	err := c.Run(ctx) // until ctx ends (SIGTERM): stop, drain, release
//
// Run runs the lease itself. The task id of a message is ID(m.Key): a
// decimal key is its number, any other key its 64-bit FNV-1a hash.
//
// # A term, from start to end
//
// When the lease issues a term (Index, Replicas, Token), the consumer opens
// the source (for a log, from the checkpoints below) and takes messages:
// one it does not own is skipped (and acknowledged, for sources that want
// that); one it owns is queued behind the earlier tasks of its id and run
// by one of Concurrency goroutines. Different ids run in parallel; one id
// never runs twice at once.
//
// Intake and task starts pause when less than DrainTimeout is left before
// the lease's deadline, until the renewal comes; by default that is just
// before each renewing registration, for its round trip, so that no task
// starts in the instant a registration may end the term. A handler's
// context ends when the lease runs out.
//
// When the term ends (the mapping changed, or the lease ran out) or Run's
// context ends, the consumer drains with package drain: it stops taking,
// lets the handlers running finish by the lease's deadline (no other holder
// can start on their tasks before it), writes its last checkpoints, and
// then takes the next term. Tasks queued but not started are left for the
// next holder; a handler still running at the deadline has its context
// cancelled, and its task is done again by the next holder. On shutdown
// the lease is still held and renewed while the drain runs (bounded by
// ShutdownTimeout), and is stopped after it.
//
// # Checkpoints: handing a log over without doing its work twice
//
// For a log (Info.Log), the group keeps checkpoints in the lease's Redis,
// in one hash under the group's hash tag ({Name}:ledger): per mapping epoch
// (its replicas), per shard, per index, the position below which every
// task of that index is done. A term with the current epoch's replicas
// continues its index's position; a term with new replicas creates the next
// epoch, which starts each shard at the old epoch's lowest position and
// skips every task that an epoch still in the history had finished. A write
// names its epoch and token and is refused once the epoch has moved on or a
// newer holder of the index has written, so a worker that wakes late cannot
// overwrite what the next mapping derived.
//
// A checkpoint never passes a task that is not done: per shard it is the
// first unfinished task taken, or the position after the last message
// read. Checkpoints are written every CheckpointInterval or
// CheckpointEvery tasks, and at every drain. So after a clean handover
// (a change of mapping, a SIGTERM) nothing is done twice, and after a crash
// only what came after the crashed worker's last checkpoint is done again.
// A group with no checkpoints starts at the beginning of the log, or at its
// end with StartAtEnd.
//
// # Failures
//
// A handler error is retried with backoff (RetryMin doubling to RetryMax),
// never skipped: by default for as long as the lease is held, each failure
// reported to OnError and logged, the task blocking its id and its shard's
// checkpoint; with MaxAttempts, the task goes to DeadLetter after that many
// failures and counts as done once DeadLetter succeeds. A task cut off by
// the lease is not a failure: it is left for the next holder.
//
// # What it assumes
//
// The guarantees of package partition, and handlers that honour their
// context: a handler that goes on after its context has ended can finish a
// task that now belongs to someone else. Effects that must never be
// applied twice should also check Assignment.Token (a fencing token)
// where they are written.
package consumer
