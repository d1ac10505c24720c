package diagrams

import (
	"fmt"
	"sort"
)

// Draw returns every diagram, by file name.
func Draw() map[string][]byte {
	return map[string][]byte{
		"group.svg":    group(),
		"timeline.svg": timeline(),
		"handover.svg": handover(),
		"ledger.svg":   ledger(),
	}
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// Names returns the diagrams' file names, sorted.
func Names() []string {
	var out []string
	for n := range Draw() {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// group: three workers share a stream; each registers with the group's
// Redis once per interval and handles the ids whose remainder is its index.
func group() []byte {
	s := newSVG(760, 300, "A group of three workers sharing a stream")
	// Redis.
	s.rect(20, 30, 190, 110, light, grey)
	s.text(115, 52, "Redis: {mail-sender}:lease", "middle", 13, ink)
	s.text(115, 76, "interval N-2: 3 registered", "middle", 12, ink)
	s.text(115, 96, "interval N-1: 3 registered", "middle", 12, ink)
	s.text(115, 116, "interval N: registering…", "middle", 12, grey)
	// The stream.
	s.text(260, 40, "the stream: each task's id decides its owner", "start", 13, ink)
	for i := range 12 {
		id := 40 + i
		x := 260 + float64(i)*40
		s.rect(x, 50, 34, 34, workerColor[id%3], "none")
		s.text(x+17, 72, fmt.Sprint(id), "middle", 12, "#ffffff")
	}
	// The workers.
	for k := range 3 {
		x := 260 + float64(k)*165
		s.rect(x, 190, 145, 70, "#ffffff", workerColor[k])
		s.text(x+72, 215, fmt.Sprintf("worker %c", 'A'+k), "middle", 13, ink)
		s.text(x+72, 235, fmt.Sprintf("index %d of 3", k), "middle", 12, workerColor[k])
		s.text(x+72, 252, fmt.Sprintf("handles id %% 3 == %d", k), "middle", 11, grey)
		// From the nearest task of its own.
		best := 0.0
		for i := range 12 {
			bx := 260 + float64(i)*40 + 17
			if (40+i)%3 == k && (best == 0 || abs(bx-(x+72)) < abs(best-(x+72))) {
				best = bx
			}
		}
		s.line(best, 88, x+72, 186, workerColor[k], false, true)
		s.line(x+10, 190, 200, 142, grey, true, true)
	}
	s.text(115, 175, "each worker registers", "middle", 12, grey)
	s.text(115, 191, "once per interval; the counts", "middle", 12, grey)
	s.text(115, 207, "of the two closed intervals", "middle", 12, grey)
	s.text(115, 223, "give its index and replicas,", "middle", 12, grey)
	s.text(115, 239, "and a lease that runs out", "middle", 12, grey)
	s.text(115, 255, "on its own", "middle", 12, grey)
	return s.bytes()
}

// timeline: four intervals; registrations inside each window, leases, a
// worker leaving, the others keeping their leases to their caps, then
// re-forming.
func timeline() []byte {
	s := newSVG(760, 280, "Intervals, registrations, leases and a handover")
	x0, iw := 60.0, 160.0
	names := []string{"N-2", "N-1", "N", "N+1"}
	for i, n := range names {
		x := x0 + float64(i)*iw
		s.line(x, 30, x, 200, "#cccccc", false, false)
		s.text(x+iw/2, 24, "interval "+n, "middle", 12, ink)
		// The window, a gap clear of each boundary.
		s.rect(x+20, 40, iw-40, 14, light, "none")
		s.text(x+iw/2, 51, "registration window", "middle", 10, grey)
	}
	s.line(x0+4*iw, 30, x0+4*iw, 200, "#cccccc", false, false)
	// Registrations: three workers in N-2 and N-1; worker 2 leaves during N-1.
	for i := range 4 {
		for k := range 3 {
			if k == 2 && i >= 1 {
				continue // worker C has left
			}
			x := x0 + float64(i)*iw + 40 + float64(k)*18
			s.circle(x, 70, 5, workerColor[k])
		}
	}
	s.text(x0+iw+100, 74, "C leaves", "start", 11, workerColor[2])
	// Leases.
	bars := []struct {
		k           int
		from, to    float64
		label       string
		standDown   bool
		labelColour string
	}{
		{0, x0, x0 + 3*iw - 10, "A holds 0 of 3", false, ""},
		{1, x0, x0 + 3*iw - 10, "B holds 1 of 3", false, ""},
		{2, x0, x0 + iw + 12, "C holds 2 of 3", false, ""},
		{0, x0 + 3*iw + 20, x0 + 4*iw, "A: 0 of 2", false, ""},
		{1, x0 + 3*iw + 20, x0 + 4*iw, "B: 1 of 2", false, ""},
	}
	for _, b := range bars {
		y := 100 + float64(b.k)*34
		s.rect(b.from, y, b.to-b.from, 22, workerColor[b.k], "none")
		s.text(b.from+8, y+15, b.label, "start", 11, "#ffffff")
	}
	// The handover: the counts disagree in N, so the leases are not renewed
	// but kept to their cap, half a gap before N+1; the pause after it.
	s.rect(x0+2*iw+20, 100, iw-30, 56, "none", "#e15759")
	s.text(x0+2*iw+iw/2+5, 170, "the counts disagree: kept to their cap", "middle", 11, "#b03030")
	s.rect(x0+3*iw-10, 100, 30, 56, "#fbe3e3", "#e15759")
	s.text(x0+3*iw+5, 92, "pause", "middle", 11, "#b03030")
	s.text(x0, 226, "A lease at N needs the two closed intervals before it to agree: P(N-1) = P(N-2).", "start", 12, ink)
	s.text(x0, 244, "It runs until the next registration is due plus the gap, never past N+2; nothing revokes it.", "start", 12, ink)
	s.text(x0, 262, "When a worker leaves, each holder keeps its lease to its cap, and the group re-forms on 2 in N+1.", "start", 12, ink)
	return s.bytes()
}

// handover: the old holder drains before its deadline and writes its
// checkpoint; the new holder starts after it, from the checkpoint.
func handover() []byte {
	s := newSVG(760, 240, "A handover")
	s.line(40, 205, 750, 205, ink, false, true)
	s.text(750, 222, "time", "end", 12, grey)
	// The old holder.
	s.rect(40, 40, 330, 28, workerColor[0], "none")
	s.text(50, 59, "old holder: takes tasks, runs them", "start", 12, "#ffffff")
	s.rect(370, 40, 120, 28, "#a8c1dc", "none")
	s.text(430, 59, "drains", "middle", 12, ink)
	s.line(490, 32, 490, 205, workerColor[0], true, false)
	s.text(494, 30, "its deadline", "start", 11, workerColor[0])
	s.circle(470, 54, 5, ink)
	s.text(476, 88, "checkpoint written", "end", 11, ink)
	s.text(476, 104, "running tasks finish, none starts;", "end", 11, grey)
	s.text(476, 118, "one cut off at the deadline is left", "end", 11, grey)
	s.text(476, 132, "to the next holder", "end", 11, grey)
	// The new holder.
	s.rect(510, 150, 240, 28, workerColor[1], "none")
	s.text(520, 169, "new holder: reads from the checkpoint", "start", 12, "#ffffff")
	s.line(510, 150, 510, 205, workerColor[1], true, false)
	s.text(514, 222, "its lease starts", "start", 11, workerColor[1])
	s.text(40, 160, "The leases never overlap: the new one", "start", 12, ink)
	s.text(40, 176, "starts after the old one has run out,", "start", 12, ink)
	s.text(40, 192, "so nothing is done twice on a clean handover.", "start", 12, ink)
	return s.bytes()
}

// ledger: one index's mark on one shard of a log: Low, the undone tasks
// between Low and High, and what is not read yet.
func ledger() []byte {
	s := newSVG(760, 210, "The checkpoint ledger's marks on a log")
	s.text(20, 28, "one shard of the log, the tasks of one index (ids with id % replicas == index):", "start", 13, ink)
	const n = 16
	low, high := 5, 11
	undone := map[int]bool{5: true, 8: true} // Low itself is never done: reading starts there again
	for i := range n {
		x := 20 + float64(i)*44
		fill, label := light, ""
		switch {
		case i < low:
			fill, label = "#59a14f", "done"
		case i < high && undone[i]:
			fill, label = "#f28e2b", "undone"
		case i < high:
			fill, label = "#59a14f", "done"
		}
		s.rect(x, 50, 38, 34, fill, "none")
		s.text(x+19, 72, fmt.Sprint(100+i), "middle", 11, ink)
		if label != "" {
			s.text(x+19, 98, label, "middle", 9, grey)
		}
	}
	xl := 20 + float64(low)*44 - 3
	xh := 20 + float64(high)*44 - 3
	s.line(xl, 40, xl, 120, ink, false, false)
	s.text(xl, 136, "Low", "middle", 13, ink)
	s.line(xh, 40, xh, 120, ink, false, false)
	s.text(xh, 136, "High", "middle", 13, ink)
	s.text(20, 166, "Below Low every task is done. From Low to High every task is done but the undone ones (Low is", "start", 12, ink)
	s.text(20, 184, "the first of them); the next holder (a new term, a new epoch) runs only those, then reads on from High.", "start", 12, ink)
	return s.bytes()
}
