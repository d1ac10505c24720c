// Package examples holds runnable programs, each a main package below this
// directory that runs with `go run` and no flags (embedded peers by
// default; flags point them at real ones), and each run by a test:
//
//   - mail-sender: the demo. An outbox of mails in a Redis stream, sent
//     over SMTP by a fleet that scales 3 -> 6 -> 2 while it works, and a
//     report of what the SMTP sink received (every mail exactly once).
//   - kafka-shared-topic: 3 partitions served by 5 workers, no consumer
//     group, per-key order kept (kfake by default).
//   - nats-filter: core NATS subscribers under leases, with what is lost
//     counted (an embedded nats-server by default).
//   - dead-letters: a worker with dead letters on (MaxAttempts,
//     deadletter.RedisStream) to drill nandi dead list, show and replay.
//   - watermill-router: two Watermill Routers on nandi's Subscriber
//     (watermillpubsub) splitting a topic by key, with Watermill's Retry
//     and PoisonQueue middleware.
//   - watermill-filter: an unchanged Watermill handler under leases, via
//     the Filter middleware, over a fan-out subscriber.
package examples
