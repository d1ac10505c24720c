package main

import (
	"context"
	"strings"
	"testing"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/transport"
)

// A fenced handoff in progress shows on the current epoch: how many of
// its indexes have released it and how many are ready to.
func TestStatusShowsAFencedHandoff(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client()
	defer c.Close()
	ctx := context.Background()
	const group = "fenced"
	l := checkpoint.NewRedis(c, group)
	origin := []transport.Position{{}}
	for _, r := range []int{1, 3} { // epoch 2, of 3, created for new replicas
		for k := range r {
			if _, err := l.Open(ctx, checkpoint.OpenRequest{Replicas: r, Index: k, Token: int64(r), Origin: origin}); err != nil {
				t.Fatal(err)
			}
		}
	}
	url := "redis://" + s.Addr()
	if _, out, _ := nandi(t, ctx, "status", "-redis", url, "-group", group); strings.Contains(out, "handing over") {
		t.Errorf("a settled epoch shown handing over:\n%s", out)
	}
	for k := range 2 {
		if _, _, err := l.Ready(ctx, checkpoint.ReadyRequest{Epoch: 2, Token: 3, Index: k, Replicas: 3}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Write(ctx, checkpoint.WriteRequest{Epoch: 2, Token: 3, Index: 0, Replicas: 3, Release: true}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := nandi(t, ctx, "status", "-redis", url, "-group", group)
	if code != 0 || !strings.Contains(out, "(handing over: 1 of 3 indexes released, 1 ready)") {
		t.Errorf("status during a fenced handoff: exit %d\n%s%s", code, out, errOut)
	}
	_, out, _ = nandi(t, ctx, "status", "-redis", url, "-group", group, "-json")
	if !strings.Contains(out, `"fenced": true`) || !strings.Contains(out, `"holding": 2`) || !strings.Contains(out, `"ready": 1`) {
		t.Errorf("status -json during a fenced handoff:\n%s", out)
	}
}
