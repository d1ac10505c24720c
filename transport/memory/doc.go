// Package memory is an in-memory sharded log with positions, where every
// reader sees every message (fan-out): the source for tests, examples and
// benchmarks, and the model the other log transports follow.
//
// A message goes to shard FNV-1a(key) % shards, so one key stays in order in
// one shard; positions in a shard count from 0. The log keeps everything it
// is given until the process ends. Append copies the payload; the readers
// share that copy, so a handler must not modify Message.Payload.
package memory
