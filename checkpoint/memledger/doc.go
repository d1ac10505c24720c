// Package memledger is the checkpoint ledger in memory: the very scripts
// of the Redis ledger (checkpoint/*.lua), run by gopher-lua over an
// in-memory keyspace that answers the few commands they call (hashes and
// a sorted set), each script atomic under one lock. It has no goroutine,
// clock or I/O of its own, so that a consumer of a log (its marks, its
// handovers, its fencing) runs under testing/synctest on fake time.
//
// It is for tests: the guarantees are proven against a real redis-server,
// and TestTheMemoryLedgerIsTheRedisOne checks that the two answer every
// sequence of calls alike.
//
// Lifecycle: New, then Ledger(group) for each group's checkpoint.Store
// (consumer.Options.Checkpoints); Clear or Delete lose keys as a Redis
// restarted without persistence, or a deleted ledger, does. A Store is
// safe for concurrent use; every script runs alone.
package memledger
