// Package natsjs is the JetStream transport: every worker of a group reads
// the stream with its own ordered consumer (ephemeral, no acks) from the
// stream sequences the consumer's checkpoint ledger gives, and handles what
// its lease owns, so a handover loses nothing. The stream is one shard; its
// sequence is the position.
//
// The task id is the message header Options.KeyHeader (default "id"), or
// Options.Key. A message without it carries an error naming its sequence
// and goes to the consumer's failure policy.
//
// Source.Producer publishes tasks where the source reads them: each key
// to its shard's subject (with Options.Shards) or to one subject, the key
// in KeyHeader; Publish waits for the stream's acknowledgement,
// PublishBatch publishes asynchronously and waits for every one.
package natsjs
