package partition

import (
	"syscall"
	"time"
)

// waitEarly is how long before a send the Run loop hands over to sleepUntil.
const waitEarly = 2 * time.Millisecond

// sleepUntil blocks the calling goroutine's thread in nanosleep until t: a
// Go timer on an idle process wakes up to a millisecond late, which would
// scramble registrations spaced a millisecond or two apart.
func sleepUntil(t time.Time) {
	for {
		d := time.Until(t)
		if d <= 0 {
			return
		}
		ts := syscall.NsecToTimespec(int64(d))
		_ = syscall.Nanosleep(&ts, nil) // EINTR: loop and sleep the rest
	}
}
