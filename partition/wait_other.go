//go:build !linux

package partition

import "time"

// waitEarly is zero where no finer sleep than a Go timer is used.
const waitEarly = 0

func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }
