// Package model holds the lease's protocol as a Promela model
// (lease.pml), mirroring partition/register.lua and partition/runner.go,
// and the tests that check it with spin: the real model must hold
// exclusivity, its deadline lemma and completeness in every state within
// its bounds, and each seeded bug must be refused with a counterexample.
//
// make test checks the small bounds exhaustively; make model the larger
// ones and the scenario of a join, a leave, a restart and a store loss;
// make chaos adds the default gap, with bitstate search.
// docs/PROTOCOL.md says what the model checks and what it does not.
package model
