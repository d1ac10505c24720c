// Package watermillfilter runs an existing Watermill router handler
// (github.com/ThreeDotsLabs/watermill/message) under a nandi lease: a
// router middleware that lets the handler run only for the messages the
// lease owns, with the consumer's rules for deadlines, drains and panics.
// It sits above package consumer; for a Watermill subscriber as a
// consumer's source, see transport/watermillsub.
//
//	lease, _ := partition.New(client, partition.Options{Name: "webhooks"})
//	go lease.Run(ctx)
//	f := watermillfilter.New(lease, watermillfilter.Options{})
//	router.AddMiddleware(f.Middleware)
//
// # Lifecycle
//
// New does no I/O. The Filter follows the lease you run; it starts no
// goroutine of its own. Each handler call enters the live term's gate
// (waiting for a renewal when less than Options.MinTime is left, and for
// the previous term's handlers to drain), and leaves it on return.
//
// # Guarantees
//
//   - A handler runs only for a message whose task id
//     (transport.TaskID of its key) the lease owns, with a context that
//     ends at the deadline of the lease it started under.
//   - A message that arrives while nothing is held is acknowledged and
//     dropped, and counted (Stats.Unheld): a subscriber that fans out
//     delivers it to every worker, and its owner handles it, if there is
//     one. There is none for a share in a handover's pause (a planned
//     change of membership: the old holder's drain and a gap and a half,
//     about 0.4 of an interval at the defaults) or, after kill -9 of its
//     holder, until the group has re-formed without it (about two
//     intervals): what arrives for it then is lost. A worker holding
//     nothing counts it in Stats.Unheld; one holding another share counts
//     it as another index's (Stats.NotOwned), so the loss is counted only
//     where nothing was held.
//   - Handlers of a term start only after the previous term's have
//     returned or its deadline has passed; those still running then are
//     overdue (Stats.Overdue, a Warn).
//   - A panic is recovered into a *consumer.PanicError, returned to the
//     router (its retry and poison middleware decide), counted and logged
//     at Error. A message without its task id returns an error marked
//     consumer.Permanent.
//
// # Which subscribers fit
//
// Those that fan out: every worker's subscription gets every message (see
// transport/watermillsub). Per-id order is the subscriber's.
package watermillfilter
