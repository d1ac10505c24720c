// Package consumertest runs a handler through the cases nandi's consumer
// survives, on tasks of its own, and reports whether each task's effect
// was applied exactly once under the handler's own fencing: users test
// their handlers the way nandi tests itself.
//
// Each case calls the handler as a consumer would in that situation,
// with the task's term in the context (consumer.AssignmentFromContext: an
// index and a fencing token, newer terms holding higher tokens), and then
// asks Options.Applied how many times the task's effect landed:
//
//   - once: one call;
//   - duplicate delivery: the same task twice in one term (an
//     at-least-once transport delivering it again);
//   - redo after a handover: once in a term, again in the next (a crash
//     before the checkpoint, a lost ledger);
//   - cut at the deadline: the call's context ends while it runs (the
//     lease ran out), then the next holder does the task;
//   - retry after an error: a call whose context had already ended, then
//     a retry in the same term;
//   - late former holder: the next holder does the task, then a call of
//     the former term arrives (a worker paused past its lease);
//   - overlap: the former holder's call and the next holder's at once.
//
// A handler passes when every task's effect is applied once. Run returns
// the Report; Check fails a test with each task that was not.
package consumertest
