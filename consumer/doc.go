// Package consumer pairs a transport.Source with a partition.Lease and the
// filter id % Replicas == Index: every worker of a group reads every
// message (of an aligned log, every message of the shards its lease can
// own ids in: transport.Info.Aligned, partition.Assignment.ShardsOf) and
// handles the ones its lease owns, in order per id, with Concurrency
// handlers at once, and hands its share over without doing work twice.
//
//	lease, _ := partition.New(redisClient, partition.Options{Name: "mail-sender"})
//	c, _ := consumer.New(lease, source, send, consumer.Options{Concurrency: 16})
//	err := c.Run(ctx) // until ctx ends (SIGTERM): stop, drain, release
//
// Run runs the lease itself. The task id of a message is ID(m.Key): a
// decimal key is its number, any other key its 64-bit FNV-1a hash.
//
// # Lifecycle
//
// New does no I/O. Run describes the source, starts the lease, and serves
// one term after another until its context ends; then it drains and
// returns (with Options.ServeToCap it first serves the term it holds to
// its lease's cap, registering no more). Every goroutine Run starts has returned when Run returns, with
// one exception it cannot avoid: a handler (or DeadLetter, or OnError) that
// never returns, which is left running and counted (Stats.Overdue). Run
// may be called once.
//
// # A term, from start to end
//
// When the lease issues a term (Index, Replicas, Token), the consumer opens
// the source (for a log, from the checkpoints below; opening is retried
// with backoff for as long as the term lasts, and Stats.Unserved says so)
// and takes messages: one it does not own is skipped (and acknowledged,
// for sources that want that); one it owns is queued behind the earlier
// tasks of its id and run by one of Concurrency goroutines. Different ids
// run in parallel; one id never runs twice at once. At most MaxPending
// tasks are taken and unfinished at once; intake waits beyond that.
//
// No task starts (and intake pauses) when less than MinTaskTime is left
// before the lease's deadline, until the renewal comes; by default that is
// just before each renewing registration, for its round trip, so that no
// task starts in the instant a registration may end the term. A handler's
// context ends when the lease runs out.
//
// When the term ends (the mapping changed, or the lease ran out) or Run's
// context ends, the consumer drains with a drain.Gate: it stops starting
// attempts, writes its checkpoints, waits for the attempts running until
// the lease's deadline (at shutdown, until ShutdownTimeout; the lease is
// held and renewed meanwhile), writes its checkpoints again and takes the
// next term. Tasks queued, or waiting between attempts, are left to the
// next holder: they are not done, so no checkpoint passes them.
//
// # Handlers that outlive their term
//
// A handler still running at the deadline has its context cancelled; one
// that has not returned 100ms later is overdue: the worker counts it
// (Stats.Overdue, Stats.OverdueTotal), logs one Warn line per term for
// all of them (their count and first keys) and one more once they have
// all returned (count, failures, keys; each return at Debug), and goes on
// with its next term without it, and at shutdown Run returns within
// ShutdownTimeout whatever handlers do. The task belongs to its next owner,
// who may run it while the overdue handler still runs. Only a fencing
// token keeps such a late effect out: check Assignment.Token where the
// effect is written (a SET guarded by the token, or SQL
// "WHERE token <= $1").
//
// # Checkpoints: handing a log over without doing its work twice
//
// For a log (Info.Log) the group keeps checkpoints in a checkpoint.Store
// (Options.Checkpoints; by default the Redis ledger beside the lease, one
// hash {Name}:ledger): per mapping epoch, per shard, per index, a
// checkpoint.Mark. Its Low is the first unfinished task of that index (or
// the position after the last message read), and above it the mark
// records that everything up to the last message read is done but the
// tasks still unfinished: a task cut off at a handover, or one that keeps
// failing, costs only itself. A term with the current epoch's replicas
// continues its index's marks; a term with new replicas creates the next
// epoch, which starts each shard at the old epoch's lowest Low and skips
// every task an epoch still in the history had finished. Writes are fenced
// by epoch and token, so a worker that wakes late cannot overwrite what
// the next holder derived. Marks are written every CheckpointInterval or
// CheckpointEvery tasks, and twice at every drain. So after a clean
// handover (a change of mapping, a SIGTERM) nothing is done twice, and
// after a crash only what the crashed worker finished after its last write
// is done again. A group with no checkpoints starts at the beginning of
// the log, or at its end with StartAtEnd; a ledger lost later is recreated
// from the newest epoch this worker saw, never from StartAtEnd (and
// counted in Stats.LedgerLosses). A ledger that cannot be read
// (checkpoint.ErrCorrupt) is served not at all: the worker logs it at
// Error, counts it (Stats.CorruptLedger), and retries while its term
// lasts, as for any open that fails.
//
// A log is described when a term opens it and every DescribeInterval while
// the term is served: when it has grown shards (partitions added to a
// Kafka topic), the term drains, writes its marks and opens it again,
// the new shards from their start.
//
// # Failures
//
// User code is treated as hostile: the handler, DeadLetter, OnError,
// OnErrorContext, RetryDelay and Options.ID are each called with a recover, and a panic becomes a
// *PanicError (errors.Is ErrPanicked) with the stack, logged at Error: for
// the handler, a failed attempt like any other.
//
// A failed attempt is retried with backoff: after the n-th failure the
// wait is drawn from [RetryMin, min(RetryMax, RetryMin×2^n)] (full
// jitter, so that tasks that failed together on a fleet's workers, a
// broker's blip, do not retry together), or is what Options.RetryDelay
// says. The consumer's own I/O (describing and opening the source,
// opening the ledger, fetching) backs off the same way, from 10ms to 1s.
// Waiting between attempts blocks the task's id, nothing else:
// no goroutine waits with it, the id's later tasks wait light (see below),
// other ids keep flowing and keep being checkpointed, and Stats.Oldest (the age of the oldest unfinished task
// per shard) shows the task that keeps failing. By default a task is
// retried for as long as the lease is held; with MaxAttempts it goes to
// DeadLetter after that many failures and is done once DeadLetter
// succeeds (DeadLetter itself is retried). A failure that cannot succeed
// is not retried: an error marked with Permanent, a message the source
// could not make a task of (transport.Message.Err) and an Options.ID error
// go to DeadLetter at once. Nothing is skipped by default: with no
// DeadLetter, letters go to the group's dead-letter stream on the lease's
// Redis ({group}:dead, bounded: DefaultDeadLetterLimit), where nandi dead
// list finds them; DeadLetter: Discard drops them, each logged at Warn
// and counted (Stats.Skipped). A task cut off by the lease is not a failure: it is left
// for the next holder.
//
// Failing tasks, fetches, opens and checkpoint writes are logged once per
// spell (a Warn when the trouble starts, an Info when it ends), never once
// per retry or per message; OnError and OnErrorContext see every failed
// attempt. Every log line that has a context is written with slog's
// Context forms: a task's with the context its handler gave
// SetTaskContext (package tracing gives its span's, so that an
// OpenTelemetry slog bridge puts "task failing" in the task's trace),
// a term's with the term's. A handler's context also carries its term
// (AssignmentFromContext) and where its task came from
// (OriginFromContext: the group, and the source's transport.Info).
//
// # What it assumes
//
// The guarantees of package partition, and handlers that honour their
// context (see above for what happens when they do not). A failing id's
// later tasks wait behind it held light (their place in the log only,
// WaitingTaskBytes each, outside MaxPending, at most MaxWaiting) and are
// read again from the log when their turn comes, so they never stop the
// other ids; on a source that cannot read again (transport.Rereader: NATS
// core, Watermill) they are held whole and count toward MaxPending, and
// when they fill it intake waits.
package consumer
