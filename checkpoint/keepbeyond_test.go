package checkpoint

import (
	"testing"

	"github.com/nandi-go/nandi/transport"
	"pgregory.net/rapid"
)

// A term's mark merged with the mark its index had in the epoch when the
// term opened it says exactly this of every position: done if the term
// finished it (or passed it done) or, beyond what the term has read, if
// the former mark said so; never done for a position either leaves
// unfinished.
func TestKeepBeyond(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const n = 60
		// The truth after the former term: done or not, per position; its
		// mark covers [low, high).
		low := rapid.IntRange(0, 20).Draw(t, "low")
		high := rapid.IntRange(low, n).Draw(t, "high")
		doneBefore := make([]bool, n)
		prior := Mark{Low: transport.Offset(uint64(low)), High: transport.Offset(uint64(high))}
		for p := range low {
			doneBefore[p] = true
		}
		for p := low + 1; p < high; p++ {
			if doneBefore[p] = rapid.Bool().Draw(t, "done before"); !doneBefore[p] {
				prior.Undone = append(prior.Undone, transport.Offset(uint64(p)))
			}
		}
		// The new term read [low, next): it finished some of what was not
		// done; its mark lists the rest.
		next := rapid.IntRange(low, n).Draw(t, "next")
		done := append([]bool(nil), doneBefore...)
		var unfinished []int
		for p := low; p < next; p++ {
			if !done[p] && p < high || p >= high {
				if done[p] = rapid.Bool().Draw(t, "finished"); !done[p] {
					unfinished = append(unfinished, p)
				}
			}
		}
		m := Mark{Low: transport.Offset(uint64(next)), High: transport.Offset(uint64(next))}
		if len(unfinished) > 0 {
			m.Low = transport.Offset(uint64(unfinished[0]))
			for _, p := range unfinished[1:] {
				m.Undone = append(m.Undone, transport.Offset(uint64(p)))
			}
		}
		got := m.KeepBeyond(prior)
		for p := range n {
			if got.Done(transport.Offset(uint64(p))) && !done[p] {
				t.Fatalf("position %d called done, and it is not (merged %+v from %+v and %+v)", p, got, m, prior)
			}
			if p < max(next, high) && done[p] && !got.Done(transport.Offset(uint64(p))) {
				t.Fatalf("position %d done, and the merged mark %+v forgets it (from %+v and %+v)", p, got, m, prior)
			}
		}
	})
}
