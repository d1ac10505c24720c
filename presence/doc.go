// Package presence is what each worker of a nandi group says of itself,
// for people: which worker holds which index, since when, how it is doing.
//
// A coordinator-free group has no member list, and nothing in the lease or
// the consumer reads presence: losing it, or never writing it, changes
// nothing a worker holds or does. package consumer writes its worker's
// Record once per lease interval (unless Options.NoPresence), in one
// pipelined round trip, and the record expires on its own TTL (3
// intervals) after the worker stops writing, a crashed one included; the
// nandi CLI (status, watch, web) reads them with Read.
//
// # Keys
//
// Beside the lease, under the group's hash tag (one Redis Cluster slot):
// {NAME}:presence is a sorted set of worker ids scored by the unix
// millisecond at which their record expires, and {NAME}:presence:ID holds
// each record as JSON, with the same expiry. A writer adds its own entry,
// removes the entries that have expired, and keeps the set itself from
// outliving the group; a reader takes the ids not yet expired and their
// records in two commands on that slot. A record of a 4-shard log is
// about 650 bytes of JSON: about 0.9 KB of Redis memory per worker, 1 MiB
// for 1,000 (BenchmarkPresenceCost).
//
// # Content
//
// Everything in a Record comes from the worker: treat it as untrusted
// text. The worker id is the host (a Kubernetes pod's name), the process
// id and, for a second consumer in one process, a sequence number, unless
// the consumer is given one.
package presence
