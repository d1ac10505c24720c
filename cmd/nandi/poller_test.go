package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nandi-go/nandi/presence"
)

// status is a Status at interval cur whose closed intervals counted
// counts (oldest first), with workers ws.
func status(cur int64, counts []int, ws ...string) *Status {
	st := &Status{Current: cur}
	for i := range counts {
		st.Counts = append(st.Counts, Count{Interval: cur - int64(len(counts)-i), Count: counts[i], Closed: true})
	}
	for _, w := range ws {
		st.Workers = append(st.Workers, presence.Record{Worker: w})
	}
	return st
}

// A join seen as a rebalance and a new worker's presence an interval
// apart is one change; polls of the same interval do not repeat it; a
// later leave is another; the first poll reports nothing (nothing was
// seen before it).
func TestChangesOfAGroup(t *testing.T) {
	tk := newTracker("g")
	at := time.Now()
	tk.noteChanges(status(10, []int{3, 3}, "a", "b", "c"), at)
	tk.noteChanges(status(11, []int{3, 3}, "a", "b", "c", "d"), at) // d's presence first
	tk.noteChanges(status(12, []int{3, 4}, "a", "b", "c", "d"), at) // then the rebalance
	tk.noteChanges(status(12, []int{3, 4}, "a", "b", "c", "d"), at) // polled again
	tk.noteChanges(status(13, []int{4, 4}, "a", "b", "c", "d"), at)
	tk.noteChanges(status(20, []int{4, 4}, "a", "b", "d"), at)
	tk.noteChanges(status(21, []int{4, 3}, "a", "b", "d"), at)
	var got []string
	for _, c := range tk.changes {
		got = append(got, strings.Join(append([]string{fmtChange(c)}, c.Workers...), "; "))
	}
	want := []string{"11: 3 -> 4; joined: d", "20: 4 -> 3; left: c"}
	if strings.Join(got, " | ") != strings.Join(want, " | ") {
		t.Errorf("changes %q; want %q", got, want)
	}
}

func fmtChange(c Change) string {
	return fmt.Sprintf("%d: %d -> %d", c.Interval, c.From, c.To)
}
