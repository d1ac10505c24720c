// Package transport is the contract between a consumer and the system its
// tasks arrive on, and nothing more than a consumer needs.
//
// Every worker of a nandi group reads every message (fan-out, no broker
// consumer group) and handles the ones its lease owns. A Source is opened
// into a Reader that fetches batches of messages. Sources that are logs
// (Redis Streams, Kafka partitions, JetStream streams, the in-memory log of
// package transport/memory) say so in their Info: their messages carry a
// shard and a position, and they can be opened at a given position per
// shard, which is what lets a group hand a log over without doing its work
// twice (the checkpoint ledger of package consumer). Other sources (NATS
// core) deliver what arrives while they are open and keep nothing.
//
// # Positions
//
// A Position is a place in one shard: two unsigned numbers compared in
// order, so that a Redis stream entry ID (milliseconds-sequence) fits
// exactly, and a single-number offset (Kafka, JetStream, memory) uses Lo
// only. A message's Position is its own place; reading "from" p delivers p
// and everything after it.
//
// # Writing a source
//
// Fetch blocks until at least one message is available or its context
// ends, and then returns the context's error promptly (a blocking read that
// ignores contexts must be cut into short reads). Close releases everything
// Open took and leaves no goroutine behind. A source reports what it cannot
// do in Info rather than failing late.
package transport
