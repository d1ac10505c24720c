package partition

// The arithmetic of intervals, slots and tokens, in server microseconds:
// pure functions of the group's settings (iv, the interval, and lo, the
// gap), so they can be tested without a lease or a network.

// slotSpacing is the most time between the slots of two consecutive
// indexes (µs): a group small enough registers in a quick burst at the
// start of the window, so its leases come early in each interval; a large
// one spreads evenly over the window, about one registration per
// millisecond or fewer, so the store never sees them all at once.
const slotSpacing = 1000

// slot is the offset in the next interval at which the holder of index i
// registers, when its registration saw p as the count of the interval
// before: (i + 0.5) spacings after the window opens, the spacing being the
// window's span over max(p, i+1), at most slotSpacing. Where a worker
// registers decides when its lease is renewed, not its index: the script
// keeps each worker's index (see register.lua).
func slot(iv, lo int64, i, p int) int64 {
	n := max(p, i+1)
	width := min(float64(aimEnd(iv, lo)-lo)/float64(n), slotSpacing)
	return lo + int64((float64(i)+0.5)*width)
}

func (l *Lease) slot(i, p int) int64 { return slot(l.iv, l.lo, i, p) }

// aimEnd is the end of the part of the window that slots are spread over:
// half a gap short of the window's end, so that the last slot of a large
// group is not a fraction of a millisecond from a refusal. A registration
// that arrives after the window is not counted, and a count one short
// remaps the whole group.
func aimEnd(iv, lo int64) int64 { return iv - lo - lo/2 }

func (l *Lease) aimEnd() int64 { return aimEnd(l.iv, l.lo) }

// token is the fencing token of a term that began in interval n: the
// server time at which n began, in milliseconds since the Unix epoch. It
// grows with time, not with the interval's number, so it keeps growing
// across a change of Interval (the interval number would shrink when the
// interval doubles) and across a step back of the server's clock (the
// script's clock never goes back within a group).
func token(n, iv int64) int64 { return n * iv / 1000 }
