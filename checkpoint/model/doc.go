// Package model holds the checkpoint ledger's protocol as a Promela model
// (ledger.pml), mirroring checkpoint/open.lua, checkpoint/write.lua and
// the consumer's marks and skip rule, and the tests that check it with
// spin: nothing owned is skipped, nothing is done twice on a clean
// handover, and a former holder's write never overwrites a newer
// holder's mark, in every state within its bounds; each seeded bug must
// be refused with a counterexample.
//
// grow.pml models what a shard count adds: an aligned log that grows from
// two shards to three under a group, producers that switch to the new
// count at any time, and a rogue producer that places an id in any shard,
// mirroring checkpoint/common.lua's alignment rules (cuts, late entries,
// the misaligned fallback) and the consumer's check of each message's
// placement (checkpoint.Epoch.Reads, Placed, Low). It checks that every
// task below a shard's low watermark is done and that realigning ends
// (every epoch has a cause); its seeded bugs are the rule as it was, a
// growth without cuts, and placement trusted.
//
// make test checks the small bounds exhaustively; make model the larger
// ones, with hash compaction (make chaos runs these too).
// docs/PROTOCOL.md says what the model checks and what it does not.
package model
