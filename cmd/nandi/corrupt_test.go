package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
)

// A corrupt checkpoint ledger (a field that used to panic nandi status
// and web's poller with an index out of range) is shown, with the field,
// and the rest of the status is still read: status exits 0, and the web
// page's snapshot has the group and the ledger's error.
func TestStatusShowsACorruptLedgerAndGoesOn(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client()
	defer c.Close()
	ctx := context.Background()
	const group = "bad-ledger"
	if err := c.HSet(ctx, partition.Key(group), "interval_us", 200000, "gap_ppm", 125000, "c:1", 2).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoint.NewRedis(c, group).Open(ctx, checkpoint.OpenRequest{Replicas: 2, Token: 1, Origin: []transport.Position{{}}}); err != nil {
		t.Fatal(err)
	}
	const bad = "1:cut:-1"
	if err := c.HSet(ctx, checkpoint.Key(group), bad, "00000000000000000000-00000000000000000005").Err(); err != nil {
		t.Fatal(err)
	}
	url := "redis://" + s.Addr()
	code, out, errOut := nandi(t, ctx, "status", "-redis", url, "-group", group)
	if code != 0 || !strings.Contains(out, "checkpoints unreadable") || !strings.Contains(out, bad) || !strings.Contains(out, "interval 200ms") {
		t.Errorf("status: exit %d; want 0, the settings, and the ledger shown unreadable naming %s\n%s%s", code, bad, out, errOut)
	}
	code, out, errOut = nandi(t, ctx, "status", "-redis", url, "-group", group, "-json")
	var st Status
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || !strings.Contains(st.LedgerError, bad) || st.Interval == 0 {
		t.Errorf("status -json: exit %d (%v); ledger_error %q; want 0 and the field named\n%s%s", code, err, st.LedgerError, out, errOut)
	}
	snap := newTracker(group).poll(ctx, c)
	if snap.Error != "" || snap.Status == nil || !strings.Contains(snap.Status.LedgerError, bad) {
		t.Errorf("the web page's snapshot: error %q, status %+v; want the group read and its ledger's error naming %s", snap.Error, snap.Status, bad)
	}

	// A lease hash no lease could have written is refused, saying which
	// field, never read as an interval of 1µs that watch would spin on.
	if err := c.HSet(ctx, partition.Key(group), "interval_us", 1).Err(); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = nandi(t, ctx, "status", "-redis", url, "-group", group)
	if code != 1 || !strings.Contains(errOut, "interval_us") {
		t.Errorf("status of a hash with interval_us 1: exit %d, %q; want 1 and the field named", code, errOut)
	}
}
