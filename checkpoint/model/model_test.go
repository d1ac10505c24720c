package model

import (
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
		// 4 tasks, replicas 1..3, 3 terms, 2 faults, every execution of up
		// to 50 steps: the bound where BUG_ANYR is found (about 11 million
		// states, 17 s)
		"replicas=3/depth=50": {Defines: []string{"L=4", "RM=3", "TERMS=3", "EVENTS=2"}, Compile: []string{"-DBFS"},
			Depth: 50, MemoryMB: 8000},
	}
	switch spintest.Mode() {
	case "full", "chaos":
		// 3 terms, exhaustive (hash compaction: a state may be missed with
		// a tiny probability): about 142 million states, 6 minutes, 7.5 GB
		runs["terms=3"] = spintest.Run{Defines: []string{"L=3", "RM=2", "TERMS=3", "EVENTS=2"},
			Compile: []string{"-DHC4"}, Pan: []string{"-w28"}, MemoryMB: 12000}
		// every execution of up to 60 steps: about 56 million states, 3 minutes
		delete(runs, "replicas=3/depth=50")
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
		// an epoch known by its number only: the bug the model found, which
		// needs 3 replicas and 3 terms (breadth first finds it soonest)
		{"BUG_ANYR", skipped, spintest.Run{Defines: []string{"L=4", "RM=3", "TERMS=3", "EVENTS=2"}, Compile: []string{"-DBFS"}, Depth: 50}},
	} {
		t.Run(bug.define, func(t *testing.T) {
			bug.run.Defines = append([]string{bug.define}, bug.run.Defines...)
			res := spintest.Check(t, "ledger.pml", bug.run)
			t.Logf("%s: %s", bug.define, res)
			if !res.Violates(bug.breaks) {
				t.Fatalf("%s was not refused by %q: %s", bug.define, bug.breaks, res)
			}
		})
	}
}
