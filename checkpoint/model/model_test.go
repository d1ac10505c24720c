package model

import (
	"strings"
	"testing"

	"github.com/nandi-go/nandi/internal/spintest"
)

const (
	skipped  = "done[p] > 0"
	twice    = "dirty || done[p] <= 1"
	newerMar = "wt[w] >= newest[e]"
)

// bounds are the real model's runs for the mode (spintest.Mode). A run
// with a Depth checks every execution up to that many steps (breadth
// first); the others are exhaustive.
func bounds() map[string]spintest.Run {
	runs := map[string]spintest.Run{
		// 2 workers, 3 tasks, replicas 1..2, 2 terms, any 2 faults (kill -9,
		// a pause past the lease, the ledger lost): about 4.7 million
		// states, 15 s
		"terms=2": {Defines: []string{"L=3", "RM=2", "TERMS=2", "EVENTS=2"}, Compile: []string{"-DCOLLAPSE"}},
	}
	switch spintest.Mode() {
	case "full", "chaos":
		// the same with the fenced handoff (provisional terms, releases
		// with the final marks): about 7.7 million states, 21 s (make test
		// checks its seeded bugs)
		runs["fence,terms=2"] = spintest.Run{Defines: []string{"FENCE", "L=3", "RM=2", "TERMS=2", "EVENTS=2"}, Compile: []string{"-DCOLLAPSE"}}
		// 3 terms, exhaustive (hash compaction: a state may be missed with
		// a tiny probability): about 142 million states, 6 minutes, 7.5 GB
		runs["terms=3"] = spintest.Run{Defines: []string{"L=3", "RM=2", "TERMS=3", "EVENTS=2"},
			Compile: []string{"-DHC4"}, Pan: []string{"-w28"}, MemoryMB: 12000}
		// 4 tasks, replicas 1..3, 3 terms, 2 faults, every execution of up
		// to 60 steps (BUG_ANYR is found within 50: make test checks that
		// it is refused there): about 56 million states, 3 minutes
		runs["replicas=3/depth=60"] = spintest.Run{Defines: []string{"L=4", "RM=3", "TERMS=3", "EVENTS=2"},
			Compile: []string{"-DBFS", "-DCOLLAPSE"}, Depth: 60, MemoryMB: 14000}
	}
	// make chaos runs the ledger at these bounds too: a bitstate search of
	// 3 replicas and 3 terms (L=3 RM=3 TERMS=3) did not finish in 20
	// minutes here.
	return runs
}

// The ledger's model holds its properties in every state within its
// bounds: nothing owned is skipped, nothing is done twice without a
// fault, and a write is applied only by the newest holder of its index to
// open the epoch.
func TestLedgerModel(t *testing.T) { spintest.Holds(t, "ledger.pml", bounds()) }

// Each seeded bug is refused by the property it breaks, with a
// counterexample (its length is the depth logged).
func TestLedgerSeededBugs(t *testing.T) {
	small := []string{"L=3", "RM=2", "TERMS=2", "EVENTS=2"}
	for _, bug := range []struct {
		define, breaks string
		run            spintest.Run
	}{
		// the write script without its fence
		{"BUG_NOFENCE", newerMar, spintest.Run{Defines: small, Compile: []string{"-DCOLLAPSE"}}},
		// marks without their Undone list
		{"BUG_NOUNDONE", skipped, spintest.Run{Defines: small, Compile: []string{"-DCOLLAPSE"}}},
		// a term's write forgets what the index's earlier mark knew beyond it
		{"BUG_NOKEEP", twice, spintest.Run{Defines: small, Compile: []string{"-DCOLLAPSE"}}},
		// the fenced handoff: a provisional term opening the next epoch
		// before every index released, and a release before the final marks
		{"FENCE,BUG_NOHOLD", twice, spintest.Run{Defines: small, Compile: []string{"-DCOLLAPSE"}}},
		{"FENCE,BUG_MARKSLATE", twice, spintest.Run{Defines: small, Compile: []string{"-DCOLLAPSE"}}},
		// an epoch known by its number only: the bug the model found, which
		// needs 3 replicas and 3 terms (breadth first finds it soonest)
		{"BUG_ANYR", skipped, spintest.Run{Defines: []string{"L=4", "RM=3", "TERMS=3", "EVENTS=2"}, Compile: []string{"-DBFS"}, Depth: 50}},
	} {
		t.Run(bug.define, func(t *testing.T) {
			bug.run.Defines = append(strings.Split(bug.define, ","), bug.run.Defines...)
			res := spintest.Check(t, "ledger.pml", bug.run)
			t.Logf("%s: %s", bug.define, res)
			if !res.Violates(bug.breaks) {
				t.Fatalf("%s was not refused by %q: %s", bug.define, bug.breaks, res)
			}
		})
	}
}

// grow.pml's properties: every task of a shard below its low watermark is
// done (notDone), every epoch has a cause, so that realigning ends
// (endless; spin prints EPOCHS expanded: TERMS + 1 + ENTRIES + ROGUE + 1),
// no task is done twice (doneTwice), and the history holds at most
// HISTORY epochs (asserted in every run; no seeded bug breaks it first).
const (
	notDone   = "p >= nlen[s]) || (done[(s * 2) + p] > 0)"
	endless   = "ep <= "
	doneTwice = "done[p] <= 1"
)

// growBounds are grow.pml's runs for the mode.
func growBounds() map[string]spintest.Run {
	runs := map[string]spintest.Run{
		// a rogue producer's one entry, the producer's one: about 1.4
		// million states, 3 s
		"rogue=1/entries=1": {Defines: []string{"ROGUE=1", "ENTRIES=1"}, Compile: []string{"-DCOLLAPSE"}},
		// no rogue, the producer's two entries, before and after the
		// growth: about 0.4 million states, 1 s
		"rogue=0/entries=2": {Defines: []string{"ROGUE=0", "ENTRIES=2"}, Compile: []string{"-DCOLLAPSE"}},
	}
	switch spintest.Mode() {
	case "full", "chaos":
		// three entries: about 3 million states
		runs["rogue=0/entries=3"] = spintest.Run{Defines: []string{"ROGUE=0", "ENTRIES=3"}, Compile: []string{"-DCOLLAPSE"}}
		runs["rogue=1/entries=2"] = spintest.Run{Defines: []string{"ROGUE=1", "ENTRIES=2"},
			Compile: []string{"-DHC4"}, Pan: []string{"-w28"}, MemoryMB: 12000}
	}
	return runs
}

// An aligned log that grows shards, and producers that misplace ids, skip
// nothing: every task below a shard's low watermark is done, and every
// new epoch has a cause, in every state within the bounds.
func TestGrowModel(t *testing.T) { spintest.Holds(t, "grow.pml", growBounds()) }

// Each of grow.pml's seeded bugs is refused with a counterexample.
func TestGrowSeededBugs(t *testing.T) {
	for _, bug := range []struct {
		define  string
		defines []string
		refused string
	}{
		// the rule as it was: the epoch keeps the old count, nothing checked
		{"BUG_OLD", []string{"ROGUE=0", "ENTRIES=2"}, notDone},
		// the new count applied before the cut: a late entry realigns
		// again and again
		{"BUG_NOCUT", []string{"ROGUE=0", "ENTRIES=1"}, endless},
		// the growth followed, no message's placement checked
		{"BUG_TRUST", []string{"ROGUE=1", "ENTRIES=1"}, notDone},
		// a realign while a holder has not opened the current epoch: the
		// holder left behind writes into an epoch dropped from the
		// history, and its tasks are done again
		{"BUG_EAGER", []string{"ROGUE=0", "ENTRIES=2"}, doneTwice},
	} {
		t.Run(strings.Join(append([]string{bug.define}, bug.defines...), ","), func(t *testing.T) {
			run := spintest.Run{Defines: append([]string{bug.define}, bug.defines...), Compile: []string{"-DCOLLAPSE"}}
			res := spintest.Check(t, "grow.pml", run)
			t.Logf("%s: %s", bug.define, res)
			if !res.Violates(bug.refused) {
				t.Fatalf("%s was not refused by %q: %s", bug.define, bug.refused, res)
			}
		})
	}
}
