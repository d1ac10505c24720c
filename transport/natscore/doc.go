// Package natscore is the core NATS transport: every worker of a group
// subscribes to the subject (no queue group) and handles what its lease
// owns.
//
// Core NATS keeps nothing. A message that arrives while no worker owns its
// index (a handover's pause at a change of membership: the old holder's
// drain and a gap and a half, about 0.4 of an interval) is lost, and so is one that a slow subscriber drops. The
// consumer counts what it read while holding nothing (consumer.Stats
// Unheld) and the Source counts what its subscriptions dropped (Dropped).
// Use JetStream (package natsjs) when a handover must lose nothing.
//
// The task id is the message header Options.KeyHeader (default "id"), or
// Options.Key. A message without it carries an error naming its subject
// and goes to the consumer's failure policy.
//
// Source.Producer publishes tasks where the source reads them: each key
// to its shard's subject (with Options.Shards), the key in KeyHeader;
// PublishBatch flushes, so the server has them when it returns.
package natscore
