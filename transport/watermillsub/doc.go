// Package watermillsub makes a transport.Source of any Watermill
// (github.com/ThreeDotsLabs/watermill) message.Subscriber, for package
// consumer. To run an existing Watermill router handler under a lease
// instead, see package watermillfilter (a router middleware, above
// package consumer; it moved there from this package, which imports
// nothing above package partition).
//
// # Which subscribers fit
//
// Every worker must see every message: use a subscriber that fans out, one
// subscription per worker. GoChannel does; watermill-redisstream does with
// an empty ConsumerGroup (or a consumer group of its own per worker; set
// DisableIndefiniteInitialBlock, or its first read blocks until a message
// comes and outlives the subscription); Kafka
// or NATS JetStream subscribers do with a consumer group or durable name
// per worker. A subscriber whose workers compete for messages (one shared
// consumer group, a NATS queue group, an SQS queue) does not fit: a worker
// would never see the messages its lease owns that another worker took.
//
// Per-id order is the order the subscriber delivers in, and most
// subscribers deliver the next message once the last is acknowledged,
// which the Source does when its task is done: one task at a time per
// subscription. GoChannel delivers each message from a goroutine of its
// own, in no set order, unless Config.BlockPublishUntilSubscriberAck is
// set.
//
// # What is guaranteed
//
// A message a worker does not own is acknowledged on its own subscription
// and not handled. A message that arrives while the worker holds nothing
// is acknowledged and dropped, and counted (consumer.Stats.Unheld): at a
// planned change of membership (a join, a clean leave) what arrives in the
// handover's pause (the old holder's drain and a gap and a half, about 0.4
// of an interval at the defaults: docs/figures.md); after kill -9 of a
// worker, what arrives for its share until the group has re-formed
// without it (about two intervals: counted only by workers holding
// nothing then; one holding another share counts it as not its own,
// Stats.NotOwned); a worker that joins drops everything for its first two
// intervals (its owner handles it). Keeping
// it for later would let a worker handle, under a new mapping, a message
// that its old owner may have handled already. For handovers that lose
// nothing, read a log with positions instead (transport/redisstream,
// transport/natsjs, transport/kafkatopic). A task the consumer gives up at
// the end of a lease is acknowledged too, and counted (Stats Abandoned).
//
// The task id is the metadata value Options.KeyMetadata (default "id"), or
// Options.Key; a message without it carries an error naming its UUID and
// goes to the consumer's failure policy.
package watermillsub
