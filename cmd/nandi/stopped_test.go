package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/deadletter"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/presence"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
)

// A group whose workers have stopped and whose lease key has expired (its
// dead letters, checkpoints and a pause left) is where on call looks: the
// page lists it, shows its dead letters, checkpoints and pause, and acts
// on it (resume, replay a letter, delete one), in a real browser. A name
// no group has is refused (404), the page's actions too.
func TestWebShowsAStoppedGroup(t *testing.T) {
	ctx := browser(t)
	srv := redistest.Start(t)
	c := srv.Client()
	bg := context.Background()
	src, err := redisstream.New(c, "invoices", redisstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := src.Producer(redisstream.ProducerOptions{})
	for _, k := range []string{"ok-1", "bad-1", "ok-2", "bad-2"} {
		if err := p.Publish(bg, k, []byte(k), nil); err != nil {
			t.Fatal(err)
		}
	}
	l, err := partition.New(c, partition.Options{Name: "invoices", Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := consumer.New(l, src, func(_ context.Context, m *transport.Message) error {
		if strings.HasPrefix(m.Key, "bad") {
			return consumer.Permanent(errors.New("no such customer"))
		}
		return nil
	}, consumer.Options{CheckpointInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(bg)
	ran := make(chan struct{})
	go func() { defer close(ran); _ = cons.Run(runCtx) }()
	redistest.WaitFor(t, 20*time.Second, "2 dead letters", func() bool { return c.XLen(bg, deadletter.Stream("invoices")).Val() == 2 })
	stop()
	<-ran
	// The lease key expired, the presence records too; the pause stays.
	c.Del(bg, partition.Key("invoices"), presence.SetKey("invoices"))
	if _, err := consumer.Pause(bg, c, "invoices", "customer db migration"); err != nil {
		t.Fatal(err)
	}

	ws := newWebServer(c, "", "")
	web := httptest.NewServer(ws.handler())
	defer web.Close()
	defer ws.Close()
	poll := func(expr string) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(15*time.Second))
	}
	click := func(action string) chromedp.Action[chromedp.Void] {
		return chromedp.Evaluate[chromedp.Void](`document.querySelector('button[data-action="` + action + `"]').click()`)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(web.URL+"/"),
		poll(`Array.from(document.querySelectorAll("#group-list a")).some(a => a.textContent === "invoices")`)); err != nil {
		t.Fatalf("the index does not list the stopped group: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(web.URL+"/g/invoices"),
		poll(`document.querySelectorAll("#dead tbody tr[data-letter]").length === 2`),
		poll(`document.getElementById("pause-state").textContent.includes("customer db migration")`)); err != nil {
		shown, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("page").innerText`))
		res, _ := http.Get(web.URL + "/api/g/invoices")
		var body []byte
		if res != nil {
			body, _ = io.ReadAll(res.Body)
			res.Body.Close()
		}
		t.Fatalf("the stopped group's page: %v\npage:\n%s\nsnapshot:\n%s", err, shown, body)
	}
	snap := ws.trackers["invoices"]
	if s, _ := snap.current(); s == nil || s.Status == nil || len(s.Status.Epochs) == 0 {
		t.Errorf("the snapshot of the stopped group has no checkpoints: %+v", s)
	}
	ls, err := deadletter.List(bg, c, deadletter.Stream("invoices"), "-", "+", 10)
	if err != nil || len(ls) != 2 {
		t.Fatal(ls, err)
	}
	before := c.XLen(bg, "invoices").Val()
	if err := chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`document.getElementById("resume").click()`),
		poll(`document.getElementById("pause-state").textContent === "Running."`),
		click("replay:"+ls[0].ID), click("replay:"+ls[0].ID),
		poll(`document.querySelectorAll("#dead tbody tr[data-letter]").length === 1`),
		click("delete:"+ls[1].ID), click("delete:"+ls[1].ID),
		poll(`document.getElementById("dead-wrap").hidden`)); err != nil {
		t.Fatalf("acting on the stopped group: %v", err)
	}
	if _, paused, _ := consumer.ReadPause(bg, c, "invoices"); paused {
		t.Error("still paused after the page's resume")
	}
	if n := c.XLen(bg, "invoices").Val(); n != before+1 {
		t.Errorf("invoices has %d entries after one replay; want %d", n, before+1)
	}
	// A mistyped group: the page and its actions say there is none.
	for _, r := range []struct{ method, path string }{{"GET", "/api/g/invoice"}, {"POST", "/api/g/invoice/pause"}, {"POST", "/api/g/invoice/resume"}} {
		req, _ := http.NewRequest(r.method, web.URL+r.path, strings.NewReader(`{}`))
		req.Header.Set("Origin", web.URL)
		req.Header.Set(csrfHeader, strings.Repeat("a", 64))
		req.AddCookie(&http.Cookie{Name: csrfCookie, Value: strings.Repeat("a", 64)})
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s: %d; want 404", r.method, r.path, res.StatusCode)
		}
	}
	if n, _ := c.Exists(bg, consumer.PauseKey("invoice")).Result(); n != 0 {
		t.Error("a pause of a mistyped group was created")
	}
}

// A command on a name no group has fails, saying which group was meant,
// and changes nothing; -create pauses a group before its first start.
func TestCommandsRefuseAGroupThatDoesNotExist(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	bg := context.Background()
	if err := writeDeadLetter(c, "mail-sender"); err != nil {
		t.Fatal(err)
	}
	url := "redis://" + srv.Addr()
	for _, args := range [][]string{
		{"pause", "-group", "mail-sendr"},
		{"resume", "-group", "mail-sendr"},
		{"dead", "list", "-group", "mail-sendr"},
		{"dead", "replay", "-group", "mail-sendr", "-all"},
		{"checkpoint", "reset", "-group", "mail-sendr", "-to", "start"},
	} {
		code, out, errOut := nandi(t, bg, append(args[:len(args):len(args)], "-redis", url)...)
		if code != exitFailed || !strings.Contains(errOut, `no group "mail-sendr"`) || !strings.Contains(errOut, `did you mean "mail-sender"?`) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("nandi %s: exit %d\n%s%s; want exit 1 and one line naming mail-sender", strings.Join(args, " "), code, out, errOut)
		}
	}
	if code, _, errOut := nandi(t, bg, "dead", "list", "-group", "zzz", "-redis", url); code != exitFailed || !strings.Contains(errOut, "the groups are: mail-sender") {
		t.Errorf("a name far from any group: exit %d, %q; want the list of groups", code, errOut)
	}
	if n, _ := c.Exists(bg, consumer.PauseKey("mail-sendr")).Result(); n != 0 {
		t.Error("a refused pause was created")
	}
	if code, out, errOut := nandi(t, bg, "pause", "-group", "new-group", "-create", "-redis", url); code != exitOK || !strings.Contains(out, "group new-group paused") {
		t.Errorf("pause -create: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := nandi(t, bg, "pause", "-group", "new-group", "-reason", "first deploy", "-redis", url); code != exitOK || !strings.Contains(out, `its reason is now "first deploy" (was "")`) {
		t.Errorf("a second pause: exit %d\n%s; want it to say the reason changed", code, out)
	}
}

// checkpoint reset -to end finds the group's Redis streams as -to start
// does: from what its workers recorded beside the ledger (here with no
// worker running), without -streams.
func TestResetToEndFindsTheStreams(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	bg := context.Background()
	src, _ := redisstream.NewSharded(c, []string{"pay.0", "pay.1"}, redisstream.Options{})
	p, _ := src.Producer(redisstream.ProducerOptions{})
	for i := range 10 {
		if err := p.Publish(bg, strings.Repeat("k", i+1), []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	l, _ := partition.New(c, partition.Options{Name: "pay", Interval: 200 * time.Millisecond})
	cons, _ := consumer.New(l, src, func(context.Context, *transport.Message) error { return nil }, consumer.Options{})
	ctx, cancel := context.WithCancel(bg)
	ran := make(chan struct{})
	go func() { defer close(ran); _ = cons.Run(ctx) }()
	redistest.WaitFor(t, 10*time.Second, "10 handled", func() bool { return cons.Stats().Handled == 10 })
	cancel()
	<-ran
	code, out, errOut := nandi(t, bg, "checkpoint", "reset", "-redis", "redis://"+srv.Addr(), "-group", "pay", "-to", "end", "-dry-run")
	if code != exitOK || !strings.Contains(out, "would reset") {
		t.Errorf("reset -to end -dry-run with no -streams: exit %d\n%s%s", code, out, errOut)
	}
}

// A request from another site that sends no Origin is refused saying what
// it sent, not "no Sec-Fetch-Site".
func TestACrossSiteRequestIsNamed(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	if err := writeDeadLetter(c, "g"); err != nil {
		t.Fatal(err)
	}
	ws := newWebServer(c, "", "")
	web := httptest.NewServer(ws.handler())
	defer web.Close()
	defer ws.Close()
	req, _ := http.NewRequest("POST", web.URL+"/api/g/g/pause", strings.NewReader(`{}`))
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "Sec-Fetch-Site: cross-site") {
		t.Errorf("a cross-site request: %d %q", res.StatusCode, body)
	}
}
