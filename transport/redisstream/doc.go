// Package redisstream is the Redis Streams transport: a consumer of one
// stream, or of several streams that a producer shards by key, shared by a
// nandi group.
//
// Every worker reads every stream with XREAD (no consumer group, so no
// XACK and no pending entries list) from the positions the consumer's
// checkpoint ledger gives, and handles what its lease owns. Stream entry IDs
// are the positions ("ms-seq" is Position{Hi: ms, Lo: seq}), ordered exactly
// as Redis orders them; each stream is one shard of the ledger.
//
// # Past one node: sharded streams
//
// NewSharded reads n streams, for example outbox:{0} .. outbox:{15}
// (Names), hash-tagged so that a Redis Cluster spreads them over its
// masters. A producer keeps each key's entries in one stream, and so in
// order, by writing a key to StreamFor(key); Source.Producer returns a
// transport.Publisher that does so, with the Source's key and payload
// fields, pipelining a batch (PublishBatch). On a single server one XREAD
// reads every stream (and blocks when they are all empty); on a
// *redis.ClusterClient, one XREAD per stream, pipelined, so one round trip
// per node; when every stream is empty it polls, backing off to Block.
//
// The task id comes from a field of the entry (Options.KeyField, default
// "id") or from Options.Key. An entry without it is not dropped: it goes to
// the consumer's failure policy with an error naming the entry. The payload
// is Options.PayloadField (default "payload"); an entry without that field
// goes to the failure policy too (its error names the fields it has),
// unless Options.OptionalPayload says payloads may be absent. Every other
// field becomes a header.
//
// Reads block for at most Options.Block (default 100ms) at a time: go-redis
// does not interrupt a blocking read when its context ends, so a cancelled
// Fetch returns within that. With Options.Trim, the group trims entries that
// every index has checkpointed past (XTRIM MINID), so the streams do not
// grow forever.
//
// # Beside the tools you already run
//
// With Options.Group, the group's low watermark (the entry below which
// every index has finished) is written as that Redis consumer group's
// last-delivered ID (XGROUP SETID, the group created if missing), about
// once an interval: XINFO GROUPS and lag exporters show the nandi group's
// progress as they would an XREADGROUP group's. Trim never removes an
// entry that another consumer group on the stream has not been delivered,
// or has pending: it stops below it, and says so (Options.Logger, once per
// spell). An entry a producer's MAXLEN (or MINID) trimmed away before the
// group read it is detected when a term opens the stream (neither the
// entry at the checkpoint nor the one just before it, which the group's
// own Trim keeps, is still there), logged with the range lost, and
// counted (Dropped).
package redisstream
