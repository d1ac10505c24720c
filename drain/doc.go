// Package drain is the four-step handover a holder of a lease owes its work:
// stop taking, finish in-flight work by a deadline, apply the new mapping,
// resume. Shutdown is the same with nothing at the end.
//
// A Gate admits tasks (Enter) until Stop, counts them while they run, and
// Wait blocks until none is left or its context ends, as
// http.Server.Shutdown waits for its connections:
//
//	g.Stop()                     // 1. stop taking: Enter fails from now on
//	err := g.Wait(ctx)           // 2. finish in-flight work, by ctx's deadline
//	apply()                      // 3. apply the new mapping
//	g.Resume()                   // 4. resume
//
// Handover runs the four steps, and Shutdown the first two.
//
// # Work still running at the deadline
//
// Wait returns ctx's error with the tasks still running; the Gate neither
// kills nor forgets them: they stay counted until they Leave, InFlight says
// how many, and a later Wait still waits for them. What happens to them is
// the owner's decision. Package consumer cancels their contexts at the
// lease's deadline, never checkpoints past them (so the next holder does
// them again), and does not resume taking until they have returned.
package drain
