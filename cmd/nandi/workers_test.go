package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nandi-go/nandi/presence"
)

// A worker handing its share over (its lease kept to its cap after the
// mapping changed) says so, with the time left, in nandi status.
func TestStatusShowsAHandover(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	s := &Status{ServerTime: now, Workers: []presence.Record{
		{Worker: "w1", Held: true, Index: 1, Replicas: 3, Since: now.Add(-time.Minute), HandingOver: true, Until: now.Add(400 * time.Millisecond)},
		{Worker: "w2", Held: true, Index: 2, Replicas: 3, Since: now.Add(-time.Minute)},
	}}
	var out bytes.Buffer
	printWorkers(&out, s)
	lines := strings.Split(out.String(), "\n")
	if !strings.Contains(lines[1], "1 of 3, handing over (400ms left)") {
		t.Errorf("w1's line: %q; want it to say 1 of 3, handing over (400ms left)", lines[1])
	}
	if strings.Contains(lines[2], "handing over") {
		t.Errorf("w2's line: %q; it is not handing over", lines[2])
	}
}
