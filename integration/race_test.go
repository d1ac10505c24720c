//go:build race

package integration

// raceSlowdown: under -race (make chaos) every step of the lease costs
// several times its CPU, and the bounds counted in intervals that a group
// settles within are protocol figures for a process that gets its CPU;
// they are stretched by this much there.
const raceSlowdown = 3
