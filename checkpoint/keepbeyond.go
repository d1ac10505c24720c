package checkpoint

import (
	"slices"

	"github.com/nandi-go/nandi/transport"
)

// KeepBeyond returns m with what prior, the mark of this index in this epoch when
// the term opened it (a former term's, this worker's or another's), says
// of the positions m has not read yet: a write replaces the mark, and a
// term that has read less than its predecessor would otherwise drop the
// knowledge that the tasks up to prior.High were done, and the next epoch
// would do them again. The consumer writes m.KeepBeyond(prior) for every
// mark, prior being the index's mark when its term opened the epoch.
func (m Mark) KeepBeyond(prior Mark) Mark {
	if !m.High.Less(prior.High) {
		return m
	}
	// prior's unfinished positions not read yet: its Low (not done) and
	// its Undone, from m.High on.
	var extra []transport.Position
	if !prior.Low.Less(m.High) {
		extra = append(extra, prior.Low)
	}
	for _, u := range prior.Undone {
		if !u.Less(m.High) {
			extra = append(extra, u)
		}
	}
	out := Mark{Low: m.Low, High: prior.High, Undone: slices.Clip(m.Undone)}
	if m.Low == m.High { // nothing unfinished read: the first unfinished is prior's
		if len(extra) == 0 {
			out.Low = prior.High
			out.Undone = nil
			return out
		}
		out.Low, extra = extra[0], extra[1:]
	}
	out.Undone = append(out.Undone, extra...)
	return out
}
