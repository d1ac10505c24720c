package main

import (
	"context"
	"strings"
	"testing"

	"github.com/nandi-go/nandi/presence"
)

// plan -shards prints the read amplification of every group size, as
// r/gcd(S, r), and suggests a shard count with a lower mean.
func TestPlanShards(t *testing.T) {
	rows, suggest, mean := shardPlan(48, 16)
	want := map[int][3]int{1: {1, 48, 1}, 5: {5, 48, 1}, 9: {3, 16, 3}, 12: {1, 4, 12}, 16: {1, 3, 16}}
	for _, r := range rows {
		if w, ok := want[r.Workers]; ok && [3]int{r.Amplification, r.PerWorker, r.Step} != w {
			t.Errorf("%d workers over 48 shards: amplification %d, %d shards each, step %d; want %v", r.Workers, r.Amplification, r.PerWorker, r.Step, w)
		}
	}
	if suggest != 120 || mean >= meanOfRows(rows) {
		t.Errorf("suggested %d shards (mean %.2f); want 120, below 48's %.2f", suggest, mean, meanOfRows(rows))
	}
	code, out, errOut := nandi(t, context.Background(), "plan", "-shards", "12", "-workers", "6")
	if code != 0 || !strings.Contains(out, "5        5x") || !strings.Contains(out, "with 60 shards: 1.00x (suggested)") {
		t.Errorf("plan -shards 12 -workers 6: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := nandi(t, context.Background(), "plan", "-shards", "-3"); code != 2 || !strings.Contains(errOut, "-shards") {
		t.Errorf("plan -shards -3: exit %d, %q; want 2 naming -shards", code, errOut)
	}
}

// status says which shards each worker reads.
func TestReadsText(t *testing.T) {
	for _, c := range []struct {
		r    presence.Record
		want string
	}{
		{presence.Record{}, "-"},
		{presence.Record{Held: true}, "all"},
		{presence.Record{Held: true, Shards: []int{1, 5, 9}, Of: 12}, "1,5,9 of 12"},
	} {
		if got := readsText(c.r); got != c.want {
			t.Errorf("readsText(%+v) = %q; want %q", c.r, got, c.want)
		}
	}
}
