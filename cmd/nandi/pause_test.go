package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
)

// nandi pause stops a running group's starts and nandi resume restarts
// them, end to end; status says so in both forms.
func TestPauseAndResumeCommands(t *testing.T) {
	s := redistest.Start(t)
	const iv = 200 * time.Millisecond
	log := memory.NewLog(1)
	for i := range 20000 {
		log.Append(strconv.Itoa(i%100), nil)
	}
	ctx := context.Background()
	g := newTestGroup(t, s.Client(), "paused", iv, log, func(context.Context, *transport.Message) error {
		time.Sleep(time.Millisecond)
		return nil
	}, consumer.Options{})
	g.start("w1")
	redistest.WaitFor(t, 10*time.Second, "the worker to hold", func() bool { return g.holding(1) })
	url := "redis://" + s.Addr()

	code, out, errOut := nandi(t, ctx, "pause", "-redis", url, "-group", "paused", "-reason", "smtp provider down")
	if code != 0 || !strings.Contains(out, "group paused paused since") || !strings.Contains(out, "(smtp provider down)") {
		t.Fatalf("pause: exit %d, %q, %q", code, out, errOut)
	}
	t.Logf("nandi pause: %s", out)
	code, out, _ = nandi(t, ctx, "status", "-redis", url, "-group", "paused")
	if code != 0 || !strings.Contains(out, "paused") || !strings.Contains(out, "smtp provider down") {
		t.Fatalf("status while paused: exit %d\n%s", code, out)
	}
	code, out, _ = nandi(t, ctx, "status", "-redis", url, "-group", "paused", "-json")
	var st Status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Paused == nil || st.Paused.Reason != "smtp provider down" {
		t.Fatalf("status -json while paused: exit %d, paused %+v\n%s", code, st.Paused, out)
	}
	assertSnakeCase(t, "status -json while paused", out)
	redistest.WaitFor(t, 10*time.Second, "the worker to see the pause", func() bool {
		for _, c := range g.consumers() {
			if !c.Stats().Paused {
				return false
			}
		}
		return true
	})
	time.Sleep(iv)
	handled := func() (n int64) {
		for _, c := range g.consumers() {
			n += c.Stats().Handled
		}
		return n
	}
	before := handled()
	time.Sleep(3 * iv)
	if after := handled(); after != before {
		t.Errorf("%d tasks handled while paused; want none", after-before)
	}

	code, out, errOut = nandi(t, ctx, "resume", "-redis", url, "-group", "paused")
	if code != 0 || !strings.Contains(out, "resumed") {
		t.Fatalf("resume: exit %d, %q, %q", code, out, errOut)
	}
	redistest.WaitFor(t, 10*time.Second, "tasks after the resume", func() bool { return handled() > before })
	if code, out, _ = nandi(t, ctx, "resume", "-redis", url, "-group", "paused"); code != 0 || !strings.Contains(out, "was not paused") {
		t.Errorf("resume of a running group: exit %d, %q", code, out)
	}
	if code, _, errOut = nandi(t, ctx, "pause", "-redis", url); code != 2 || !strings.Contains(errOut, "usage") {
		t.Errorf("pause without -group: exit %d, %q; want 2 and the usage", code, errOut)
	}
}

// nandi watch shows a pause, a new reason and a resume as lines of their
// own, as it reads them, also for a group with no lease.
func TestWatchShowsPauseAndResume(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	bg := context.Background()
	if err := writeDeadLetter(c, "watched"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	var out, errOut lockedBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"watch", "-redis", "redis://" + srv.Addr(), "-group", "watched"}, &out, &errOut)
	}()
	waitLine := func(what string) {
		t.Helper()
		redistest.WaitFor(t, 10*time.Second, what, func() bool { return strings.Contains(out.String(), what) })
	}
	if _, err := consumer.Pause(bg, c, "watched", "smtp down"); err != nil {
		t.Fatal(err)
	}
	waitLine(`PAUSED since`)
	waitLine(`(smtp down)`)
	if _, err := consumer.Pause(bg, c, "watched", "smtp down until 14:00"); err != nil {
		t.Fatal(err)
	}
	waitLine(`PAUSE reason now "smtp down until 14:00" (was "smtp down")`)
	if _, err := consumer.Resume(bg, c, "watched"); err != nil {
		t.Fatal(err)
	}
	waitLine("RESUMED")
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("watch: exit %d\n%s%s", code, out.String(), errOut.String())
	}
}
