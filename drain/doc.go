// Package drain will hold the four-step handover: stop taking, finish
// in-flight work by a deadline, apply the new mapping, resume. Shutdown is
// the same with nothing at the end. Not built yet.
package drain
