package checkpoint

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/transport"
)

// The fenced handoff on a real redis-server: a provisional term of new
// replicas opens the next epoch only once every index of the current one
// was released by its newest opener, with its final marks, and the new
// epoch starts from those marks; never from a first epoch or one created
// after a loss (they do not know who serves them), and a former holder's
// release releases nothing.
func TestProvisionalOpenWaitsForEveryRelease(t *testing.T) {
	srv := redistest.Start(t)
	l := NewRedis(srv.Client(), "fenced")
	ctx := context.Background()
	origin := []transport.Position{{}}
	open := func(r, k int, tok int64, prov bool) (*State, error) {
		return l.Open(ctx, OpenRequest{Replicas: r, Index: k, Token: tok, Origin: origin, Provisional: prov})
	}
	final := func(e int64, r, k int, tok int64, low uint64) error {
		return l.Write(ctx, WriteRequest{Epoch: e, Token: tok, Index: k, Replicas: r, Release: true,
			Marks: map[int]Mark{0: {Low: transport.Offset(low), High: transport.Offset(low)}}})
	}
	if _, err := open(2, 0, 10, true); !errors.Is(err, ErrHeld) {
		t.Fatalf("a provisional open of no ledger = %v; want ErrHeld (it never creates one)", err)
	}
	// Epoch 1 (first): fences nothing, even released.
	for k := range 2 {
		if _, err := open(2, k, 10, false); err != nil {
			t.Fatal(err)
		}
	}
	for k := range 2 {
		if err := final(1, 2, k, 10, 8); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := open(3, 0, 20, true); !errors.Is(err, ErrHeld) {
		t.Fatalf("a provisional open over a first epoch = %v; want ErrHeld", err)
	}
	// Epoch 2, created by an ordinary term of 3 (the lease's timing): it
	// knows who serves it.
	for k := range 3 {
		if _, err := open(3, k, 30, false); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := l.Read(ctx); st.Current.N != 2 || !st.Current.Fenced {
		t.Fatalf("epoch %d, fenced %v; want 2, fenced", st.Current.N, st.Current != nil && st.Current.Fenced)
	}
	// Format 4 from the first fenced epoch on: a worker of a version
	// before the fenced handoff refuses the ledger rather than open it
	// without being counted among the holders a handoff waits for.
	if v := srv.Client().HGet(ctx, Key("fenced"), "v").Val(); v != "4" {
		t.Fatalf("ledger format %q after a fenced epoch; want 4", v)
	}
	// Index 2 reopened by a newer term of the same mapping (token 35):
	// the older one's release (token 30) releases nothing.
	if _, err := open(3, 2, 35, false); err != nil {
		t.Fatal(err)
	}
	if err := final(2, 3, 0, 30, 12); err != nil {
		t.Fatal(err)
	}
	if err := final(2, 3, 1, 30, 12); err != nil {
		t.Fatal(err)
	}
	if _, err := open(4, 0, 40, true); !errors.Is(err, ErrHeld) {
		t.Fatalf("a provisional open with index 2 unreleased = %v; want ErrHeld", err)
	}
	if err := final(2, 3, 2, 30, 12); !errors.Is(err, ErrFenced) {
		t.Fatalf("a former holder's final write = %v; want ErrFenced", err)
	}
	if _, err := open(4, 0, 40, true); !errors.Is(err, ErrHeld) {
		t.Fatalf("a provisional open after a former holder's release = %v; want ErrHeld", err)
	}
	if err := final(2, 3, 2, 35, 12); err != nil {
		t.Fatal(err)
	}
	st, err := open(4, 0, 40, true)
	if err != nil || !st.Created || st.Current.N != 3 {
		t.Fatalf("a provisional open after every release = %+v, %v; want epoch 3 created", st, err)
	}
	if got := st.Current.Start[0]; got != transport.Offset(12) {
		t.Fatalf("epoch 3 starts at %v; want 12, where every final mark of epoch 2 is", got)
	}
	// Another provisional term of 4 joins its epoch; an ordinary term of
	// an older lease is stale.
	if _, err := open(4, 1, 40, true); err != nil {
		t.Fatalf("a second provisional term of the new mapping = %v", err)
	}
	if _, err := open(3, 1, 35, false); !errors.Is(err, ErrStale) {
		t.Fatalf("the old mapping's open after the handoff = %v; want ErrStale", err)
	}
	// The ledger lost: created again (lost), it fences nothing.
	if err := srv.Client().Del(ctx, Key("fenced")).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Open(ctx, OpenRequest{Replicas: 4, Index: 0, Token: 50, Origin: origin, Seen: 3, SeenStart: []transport.Position{transport.Offset(12)}}); err != nil {
		t.Fatal(err)
	}
	for k := range 4 {
		_, _ = open(4, k, 50, false)
		_ = final(4, 4, k, 50, 12)
	}
	if _, err := open(5, 0, 60, true); !errors.Is(err, ErrHeld) {
		t.Fatalf("a provisional open over a ledger created after a loss = %v; want ErrHeld", err)
	}
}

// Readiness, the fenced handoff's first phase: each held index counts
// once, a release takes it out of both counts, a newer opener of a ready
// index is not ready, and only the index's newest opener may say it.
func TestReadyCountsTheHeldIndexesReadyToHandOver(t *testing.T) {
	srv := redistest.Start(t)
	l := NewRedis(srv.Client(), "ready")
	ctx := context.Background()
	origin := []transport.Position{{}}
	for _, r := range []int{2, 3} { // epoch 2, of 3, created for new replicas
		for k := range r {
			if _, err := l.Open(ctx, OpenRequest{Replicas: r, Index: k, Token: int64(10 * r), Origin: origin}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ready := func(k int, tok int64) (int, int, error) {
		return l.Ready(ctx, ReadyRequest{Epoch: 2, Token: tok, Index: k, Replicas: 3})
	}
	want := func(what string, gotR, gotH int, err error, r, h int) {
		t.Helper()
		if err != nil || gotR != r || gotH != h {
			t.Fatalf("%s: ready %d of %d held, %v; want %d of %d", what, gotR, gotH, err, r, h)
		}
	}
	r, h, err := ready(0, 30)
	want("index 0 ready", r, h, err, 1, 3)
	r, h, err = ready(0, 30)
	want("index 0 ready again", r, h, err, 1, 3)
	r, h, err = ready(1, 30)
	want("index 1 ready", r, h, err, 2, 3)
	if _, _, err := ready(2, 29); !errors.Is(err, ErrFenced) {
		t.Fatalf("ready from a holder that is not the newest opener = %v; want ErrFenced", err)
	}
	if err := l.Write(ctx, WriteRequest{Epoch: 2, Token: 30, Index: 0, Replicas: 3, Release: true}); err != nil {
		t.Fatal(err)
	}
	r, h, err = ready(1, 30)
	want("index 0 released", r, h, err, 1, 2)
	if _, err := l.Open(ctx, OpenRequest{Replicas: 3, Index: 1, Token: 35, Origin: origin}); err != nil {
		t.Fatal(err)
	}
	r, h, err = ready(2, 30)
	want("index 1 reopened by a newer term, index 2 ready", r, h, err, 1, 2)
	r, h, err = ready(1, 35)
	want("index 1's new holder ready", r, h, err, 2, 2)
	if _, _, err := l.Ready(ctx, ReadyRequest{Epoch: 1, Token: 20, Index: 0, Replicas: 2}); !errors.Is(err, ErrMoved) {
		t.Fatalf("ready in an epoch that is not current = %v; want ErrMoved", err)
	}

	// A count it would add to that is not an integer: refused before any
	// write (a failing script keeps what it wrote), the index not marked.
	c, marks := srv.Client(), Key("ready")+":marks"
	for _, bad := range []string{"x", "1.5"} {
		c.HDel(ctx, marks, "2:rdy:2")
		c.HSet(ctx, Key("ready"), "2:ready", bad)
		if _, _, err := ready(2, 30); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "2:ready") {
			t.Fatalf("ready with the count %q = %v; want ErrCorrupt naming 2:ready", bad, err)
		}
		if v := c.HGet(ctx, marks, "2:rdy:2").Val(); v != "" {
			t.Errorf("the refused ready (count %q) marked index 2 (%q): a failed script must write nothing", bad, v)
		}
	}
}
