package partition

// The arithmetic of intervals, slots and tokens, in server microseconds:
// pure functions of the group's settings (iv, the interval, and lo, the
// gap), so they can be tested without a lease or a network.

// slot is the offset in the next interval at which the holder of index i
// registers, when its registration was the one with index i and saw p as the
// count of the interval before (every worker with an index below p spaces
// itself by p), and c is the final count of its own interval, where known
// (else pass i+1, its floor).
//
// Below p it is the slot (i + 0.5)/p of the window. At or past p (a worker
// that joined, or was pushed there by one that did) it goes after every slot
// spaced by p: into the last half slot, in order of i, spread by c. Spacing
// these by c instead, as the workers before them do not, would put index p
// a fraction of a millisecond after index p-1 and swap them on the next
// jitter.
func slot(iv, lo int64, i, p, c int) int64 {
	span := float64(aimEnd(iv, lo) - lo)
	c = max(c, i+1)
	if p == 0 {
		return lo + int64((float64(i)+0.5)/float64(c)*span)
	}
	if i < p {
		return lo + int64((float64(i)+0.5)/float64(p)*span)
	}
	frac := (float64(p) - 0.5 + 0.5*float64(i-p+1)/float64(c-p+1)) / float64(p)
	return lo + int64(frac*span)
}

func (l *Lease) slot(i, p, c int) int64 { return slot(l.iv, l.lo, i, p, c) }

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
