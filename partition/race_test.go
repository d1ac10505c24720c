//go:build race

package partition

// raceBuild: -race slows the simulation about tenfold; the test at scale
// then runs a smaller group, and make test runs it at full size without
// -race.
const raceBuild = true
