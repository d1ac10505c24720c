// Package checkpoint is the checkpoint ledger of a nandi group: how a
// consumer of a log hands it over without doing its work twice.
//
// For every mapping epoch (a run of terms with one Replicas), every shard
// of the log and every index, the ledger keeps a Mark: the position Low
// below which every task of that index is done, and the tasks after it,
// up to High, that are done too but for the ones listed as Undone (a task
// cut off at a handover, or one that keeps failing). A new holder of an
// index reads each shard from its Low and skips a task at position p with
// id x when State.Done says so: some epoch still in the history had
// finished it. So after a clean handover (every holder wrote its last
// marks) nothing is done twice; after a crash, only what the crashed
// holder finished after its last write is.
//
// # Lifecycle
//
// A holder calls Open at the start of each term (one atomic script that
// returns the ledger's head: every epoch's counts, starts, cuts and low
// watermarks), reads the marks it needs a page at a time (State.Prepare:
// its own, and the older epochs' of the shards it reads), calls Write
// every so often and at the end of the term, and Realign when it finds a
// task its aligned log placed elsewhere. Open creates the next epoch when
// the holder's replicas differ from the current epoch's, a shard was
// rewound, or an aligned log grew (each old shard is then cut at its end:
// every index reads what lies below, placed by the old count, Epoch.Reads);
// it starts each shard at the current epoch's low watermark, and keeps in
// the history every older epoch whose marks reach above that start. Read
// and ReadLow are for tools (nandi status) and sinks (pgsink's watermark).
//
// # Guarantees
//
//   - Atomic, always on the master, bounded: Open, Write, Realign and
//     Read are scripts on three declared keys under the group's hash tag
//     ({group}:ledger, :marks, :lows; one node on Redis Cluster), each
//     doing work bounded by the shards it is given, never by replicas x
//     shards: a mapping change of 1,000 workers over 48 shards or 2,100
//     over one stream runs every script in under 20 ms (TestLedgerAtScale,
//     SLOWLOG), and epochs that leave the history are collected a few
//     hundred fields per call.
//   - Placement checked: on an aligned epoch every message must lie in
//     the shard its id belongs to (Epoch.Placed); the consumer realigns on
//     the first that does not (Realign: the cuts move to the log's end
//     for a producer still placing by the count before a growth, else the
//     epoch stops being aligned), so nothing is skipped.
//   - Fenced: a Write names its epoch and token, and is refused once the
//     epoch has moved on (ErrMoved) or a newer holder of the index has
//     opened or written it (ErrFenced). A paused former holder that wakes
//     cannot overwrite its successor's marks, nor move them.
//   - Never backwards: within an epoch an index's Low never goes down.
//   - Loss is noticed, never turned into a skip: a worker passes the
//     newest epoch it has seen (OpenRequest.Seen and SeenStart); a ledger
//     that is gone is recreated from that epoch's start, not from the
//     origin (which with consumer.Options.StartAtEnd would skip what lies
//     between), and State.Lost says so; a ledger older than what the
//     worker saw is State.Behind. Work may then be done again; none is
//     skipped.
//   - Refused, never trusted, when damaged: a ledger whose counts or
//     fields no script writes (an epoch of 10^12 replicas, a mark at
//     shard -1) is ErrCorrupt naming the field, from Open (whose script
//     checks what it loops over before writing anything) and Read alike;
//     no panic, no unbounded allocation, no script looping for hours.
//     FuzzParse reads hostile hashes.
//   - Exact: package consumer lists every unfinished task in Undone (its
//     Options.MaxPending bounds them), stored compactly (the first position
//     whole, each next one relative to it: about 4 bytes each), so a clean
//     handover repeats nothing however many tasks wait behind a failing id.
//
// # What it assumes
//
// Tokens that grow across successive holders of an index (the lease's
// Assignment.Token), and a store that keeps what it acknowledged (see
// partition's assumptions; a loss is detected as above). docs/PROTOCOL.md
// describes the scripts field by field.
//
// # Moving checkpoints
//
// Redis.Reset (nandi checkpoint reset) moves every index of a stopped
// group to given positions, as a new epoch with no history: reprocess
// from a point, or skip a backlog. It refuses while a lease of the group
// may be held (ErrGroupRunning), and when it cannot see the lease
// (ErrLeaseUnknown: with the ledger on another Redis, pass the lease's
// client in ResetOptions.Lease), watching the lease's and the ledger's
// keys so that a worker registering meanwhile makes it fail, not race.
package checkpoint
