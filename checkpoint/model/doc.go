// Package model holds the checkpoint ledger's protocol as a Promela model
// (ledger.pml), mirroring checkpoint/open.lua, checkpoint/write.lua and
// the consumer's marks and skip rule, and the tests that check it with
// spin: nothing owned is skipped, nothing is done twice on a clean
// handover, and a former holder's write never overwrites a newer
// holder's mark, in every state within its bounds; each seeded bug must
// be refused with a counterexample.
//
// make test checks the small bounds exhaustively; make model the larger
// ones, with hash compaction (make chaos runs these too).
// docs/PROTOCOL.md says what the model checks and what it does not.
package model
