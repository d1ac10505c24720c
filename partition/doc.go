// Package partition gives each worker of an elastic group its index and the
// group's replicas, derived from Redis counters with no coordinator, as an
// exclusive lease that runs out on its own.
//
// A group splits its tasks with id % Replicas == Index. Every worker
// registers once per interval (Options.Interval) with one Lua script that
// reads the server's clock, so all workers agree on which interval it is.
// The script counts the interval's registrations (field c:N of the group's
// hash {Name}:lease) and grants each one an index: the one the worker held
// in the interval before when it still fits, else the lowest free one.
// Once the interval has closed its count is how many workers took part. A worker that
// registered in the intervals M-2, M-1 and M, and found that the two closed
// ones imply the same (index, replicas), holds that pair as a lease from its
// registration in M until its next registration is due plus a gap, and
// never past the start of M+2. Nothing renews a lease but another agreeing
// registration, and nothing has to revoke it.
//
// # Lifecycle
//
// New validates the options and does no I/O. Run blocks: it registers at
// the worker's slot of every interval, issues, renews and ends terms, and
// returns when its context ends (ending the live term with ErrStopped and
// returning nil), or at once with an error wrapping ErrSettingsMismatch if
// the group runs with another Interval or Gap. Run may be called once; a
// stopped Lease is not restarted.
//
// A new worker registers at once and holds nothing for two intervals: its
// first registration has no closed interval to pair with, and a lease
// needs two that agree. A change of membership changes every worker's
// pair (the count): each worker stops renewing its term and keeps it to
// its cap (half a gap before the new mapping's holders may start, which is
// as long as any lease from its interval lasts), then takes its new share,
// so each index goes unserved for about a gap and a half, not an interval.
// A settled group keeps its indexes
// indefinitely: the script grants each worker the index it held in the
// interval before, so the order in which registrations arrive decides
// nothing, and jitter moves nobody.
//
// # Where a worker registers
//
// Once per interval, at its slot: (index + 0.5) spacings after the window
// opens, the spacing being the window's span over the group's size, at
// most 1ms: a small group renews in a burst at the start of the window, a
// large one spreads evenly. Sends are timed by the server's clock as
// mapped by the fastest recent round trip, and the last two milliseconds
// are slept in nanosleep (Linux) rather than on a Go timer, which on an
// idle process wakes up to a millisecond late. A worker whose index fell
// out of range (the group shrank) or that is new takes the lowest index
// nobody held in the interval before (see docs/PROTOCOL.md).
//
// # Reading the lease
//
// Current reports what is held at the instant it is called, checked on the
// monotonic clock: a process paused past its deadline sees nothing held
// before any goroutine of the lease has run. Term returns the live *Term,
// which tells its own lifetime as etcd's Session does: Done is closed when it
// ends, Err says why (ErrMappingChanged, ErrExpired, ErrGenerationChanged or
// ErrStopped), Deadline is when it runs out unless renewed, and Renewed
// receives each new deadline. Next waits for a term without polling, and
// Changed is closed at each acquisition or loss.
//
// All methods are safe for concurrent use. No channel of a Lease or Term is
// ever sent to in a way that could block the lease: Renewed keeps only the
// latest deadline, Done and Changed are closed, never sent to. A slow reader
// misses nothing it needs: it can always ask Current, Term or Deadline.
//
// Stats returns the lease's counts (calls, registrations, failures,
// stand-downs by reason, time held, round trips) for monitoring; package
// metrics exports them to Prometheus and package health answers probes
// from them.
//
// # Guarantees
//
// At any moment all live leases of a group share one Replicas and no two
// share an Index, so no task is held by two workers at once; and once the
// membership has been stable for two intervals every index 0..Replicas-1 is
// held by a live worker, so no task is left without an owner.
//
// Why: leases issued at M and M' with |M-M'| <= 1 were both derived from
// one closed interval, in which a counter handed each index out once and
// whose final count they both read. Leases with |M-M'| >= 2 cannot overlap
// in time: the later one starts at least Gap*Interval into M' (the script
// refuses registrations outside the window [Gap, 1-Gap] of an interval) and
// the earlier one ends by the start of M+2. Token, the server time (ms) at
// which the interval a term began in started, is a fencing token:
// successive holders of any task hold strictly increasing tokens, also
// across changes of Interval and steps back of the server's clock.
// docs/PROTOCOL.md gives the whole argument, field by field.
//
// Losing contact is noticed on a clock, not on an error: every deadline is a
// local monotonic timer, computed conservatively from the server's time (a
// server instant X is taken to be no later than local send time +
// (X - T)), and a registration that hangs inside the client does not keep
// the lease past it. Run returns promptly when its context ends even then;
// the abandoned call returns when the client's own timeouts fire.
//
// A registration never counts twice: each carries a token, and a retry of
// one that already ran (go-redis retries on network errors) is answered with
// the first registration instead of a second increment.
//
// The store's generation (its run_id, its master_replid and a random nonce
// kept in the group's lease hash) changes whenever the store may have lost
// acknowledged writes: a restart, a failover, a flush or expired group keys.
// A worker that sees a new generation drops its history and its term
// (ErrGenerationChanged), and holds nothing until two intervals after its
// first answer from the new generation, by which time every lease of the
// old one has run out even if the store's clock moved back across the loss.
//
// # Assumptions
//
// The guarantees rest on these, and break without them:
//
//   - Within one generation the store keeps every interval's counter. A
//     store that loses acknowledged writes without a new generation breaks
//     this: keys evicted under memory pressure (run Redis with
//     maxmemory-policy noeviction, or give it room), or a master cut off
//     from its replicas that goes on answering some workers while a
//     promoted replica answers others (split brain). Options.WaitReplicas
//     narrows the latter: a master cut off from all but fewer than
//     WaitReplicas of its replicas cannot have a registration acknowledged,
//     so its workers' leases run out. It does not help when the old master
//     keeps WaitReplicas replicas on its side of the split; pair it with
//     min-replicas-to-write (or a WaitReplicas above half the replicas).
//   - The store's clock does not step forward by more than Gap*Interval
//     (steps back are absorbed: the script keeps the highest time it has
//     seen per group), and after a failover the new master's clock agrees
//     with the old one's within Gap*Interval.
//   - Each worker's monotonic clock runs at the store clock's rate to well
//     within Gap/4: a deadline is mapped from a clock sample up to two
//     intervals old and lies up to two intervals past it, so a clock slow by
//     a fraction ρ stops up to 4ρ intervals late (see Clock). Quartz drifts
//     by about 0.01%.
//   - The script touches only the key it declares (the group's hash), as
//     Redis Cluster requires; a slot migration or a failover of the group's
//     master is a new generation (the node's run_id and replication id
//     differ), so the group stands down and re-forms.
//   - The work a holder does is finished, or abandoned, by the deadline of
//     the lease it was started under. The lease decides who owns what; the
//     drain (package drain, and package consumer) is what makes that mean
//     anything.
//
// A worker that registers and then dies stays counted in the interval it
// last registered in, so its share goes unowned until the group has
// re-formed without it: about two intervals (the others serve their old
// shares to their caps meanwhile).
//
// # Keys
//
// A group's lease state is one hash, Key(Name) = "{Name}:lease": the
// settings, the clamped clock, the nonce, and the counts and tokens of the
// last three intervals (CountField(N) counts interval N; older ones are
// deleted by the first registration of each interval). The script declares
// it and touches no other key, as Redis Cluster requires of scripts: a slot
// migration moves the whole state at once, never half of it, and the node
// that answers afterwards is a new store generation (its run_id differs),
// so the group stands down for about three intervals and re-forms. The
// hash expires after 10 idle intervals, after which the group may change
// settings. The checkpoints of package consumer live in "{Name}:ledger",
// on the same node.
package partition
