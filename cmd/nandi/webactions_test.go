package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/deadletter"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/redis/go-redis/v9"
)

// The page acts, in a real browser (headless Chromium) against a group on
// a real redis-server: it shows a dead letter whole (a text payload as
// text, a binary one as hex), pauses the group with a reason and resumes
// it, replays a letter to the stream it came from (the group handles it
// again) and deletes another, each with a confirming second click; its
// chart counts what the group handled. A request without the page's CSRF
// token, or from another origin, is refused and changes nothing; a
// read-only server shows no action and refuses them all.
func TestWebActionsInABrowser(t *testing.T) {
	ctx := browser(t)
	srv := redistest.Start(t)
	c := srv.Client()
	bg := context.Background()
	src, err := redisstream.New(c, "orders", redisstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := src.Producer(redisstream.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		key, payload := "good", []byte("order "+string(rune('a'+i%26)))
		switch i {
		case 3:
			key, payload = "bad", []byte("declined card 4242")
		case 7:
			key, payload = "bin", []byte{0xff, 0x00, 0x10}
		}
		if err := p.Publish(bg, key, payload, map[string]string{"tenant": "acme"}); err != nil {
			t.Fatal(err)
		}
	}
	var fixed atomic.Bool
	var handled atomic.Int64
	lease, err := partition.New(c, partition.Options{Name: "orders", Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := consumer.New(lease, src, func(_ context.Context, m *transport.Message) error {
		if m.Key != "good" && !fixed.Load() {
			return errors.New("card declined")
		}
		handled.Add(1)
		return nil
	}, consumer.Options{MaxAttempts: 1, WorkerID: "w1", DeadLetter: deadletter.RedisStream(c, deadletter.Stream("orders"), deadletter.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(bg)
	ran := make(chan struct{})
	go func() { defer close(ran); _ = cons.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-ran })
	redistest.WaitFor(t, 20*time.Second, "28 tasks handled and 2 dead letters", func() bool {
		return handled.Load() == 28 && c.XLen(bg, deadletter.Stream("orders")).Val() == 2
	})
	ls, err := deadletter.List(bg, c, deadletter.Stream("orders"), "-", "+", 10)
	if err != nil || len(ls) != 2 {
		t.Fatalf("letters %v, %v", ls, err)
	}
	bad, bin := ls[0], ls[1]
	if bad.Key != "bad" {
		bad, bin = bin, bad
	}

	ws := newWebServer(c, "orders", "")
	web := httptest.NewServer(ws.handler())
	defer web.Close()
	defer ws.Close()
	// The page's JSON keys are snake_case, as every -json output's.
	if res, err := http.Get(web.URL + "/api/g/orders"); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		assertSnakeCase(t, "/api/g/orders", string(b))
	}
	poll := func(expr string) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(15*time.Second))
	}
	click := func(action string) chromedp.Action[chromedp.Void] {
		return chromedp.Evaluate[chromedp.Void](`document.querySelector('button[data-action="` + action + `"]').click()`)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(web.URL+"/g/orders"),
		poll(`document.querySelectorAll("#dead tbody tr[data-letter]").length === 2`)); err != nil {
		t.Fatalf("the page never showed the 2 dead letters: %v", err)
	}

	// A letter whole: the text payload as text, the binary one as hex.
	if err := chromedp.Do(ctx, click("show:"+bad.ID),
		poll(`document.getElementById("letter-payload").textContent === "declined card 4242" && document.getElementById("letter-fields").textContent.includes("header tenant")`),
		click("show:"+bin.ID), poll(`document.getElementById("letter-payload").textContent === "ff0010"`)); err != nil {
		t.Errorf("showing the letters: %v", err)
	}

	// Pause with a reason, then resume.
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`document.getElementById("pause-reason").value = "card processor down"`),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("pause").click()`),
		poll(`document.getElementById("pause-state").textContent.includes("card processor down")`)); err != nil {
		t.Errorf("pausing from the page: %v", err)
	}
	if st, paused, err := consumer.ReadPause(bg, c, "orders"); err != nil || !paused || st.Reason != "card processor down" {
		t.Errorf("after the page's pause: paused %v (%+v), %v; want paused with its reason", paused, st, err)
	}
	if err := chromedp.Do(ctx, poll(`!document.getElementById("resume").hidden`), chromedp.Evaluate[chromedp.Void](`document.getElementById("resume").click()`),
		poll(`document.getElementById("pause-state").textContent === "Running."`)); err != nil {
		t.Errorf("resuming from the page: %v", err)
	}
	if _, paused, _ := consumer.ReadPause(bg, c, "orders"); paused {
		t.Errorf("the group is still paused after the page's resume")
	}

	// Replay the text letter (two clicks): it goes back to orders, the
	// group handles it; delete the binary one: gone, not replayed.
	fixed.Store(true)
	before := c.XLen(bg, "orders").Val()
	if err := chromedp.Do(ctx, click("replay:"+bad.ID), click("replay:"+bad.ID),
		poll(`!Array.from(document.querySelectorAll("#dead tbody tr[data-letter]")).some(r => r.dataset.letter === "`+bad.ID+`")`)); err != nil {
		t.Errorf("replaying from the page: %v", err)
	}
	redistest.WaitFor(t, 15*time.Second, "the replayed task handled", func() bool { return handled.Load() == 29 })
	if n := c.XLen(bg, "orders").Val(); n != before+1 {
		t.Errorf("orders has %d entries after the replay; want %d", n, before+1)
	}
	if err := chromedp.Do(ctx, click("delete:"+bin.ID), click("delete:"+bin.ID),
		poll(`document.getElementById("dead-wrap").hidden`)); err != nil {
		t.Errorf("deleting from the page: %v", err)
	}
	if n := c.XLen(bg, deadletter.Stream("orders")).Val(); n != 0 {
		t.Errorf("%d letters left; want none", n)
	}
	if n := c.XLen(bg, "orders").Val(); n != before+1 {
		t.Errorf("orders has %d entries after the delete; want %d (a deleted letter is not replayed)", n, before+1)
	}
	if err := chromedp.Do(ctx, poll(`Number(document.getElementById("chart").dataset.handled) > 0`)); err != nil {
		t.Errorf("the chart counts nothing handled: %v", err)
	}

	// Forged requests: no CSRF token, another origin. Nothing changes.
	for name, req := range map[string]func() *http.Request{
		"no CSRF token": func() *http.Request {
			r, _ := http.NewRequest("POST", web.URL+"/api/g/orders/pause", strings.NewReader(`{}`))
			r.Header.Set("Origin", web.URL)
			return r
		},
		"another origin": func() *http.Request {
			r, _ := http.NewRequest("POST", web.URL+"/api/g/orders/pause", strings.NewReader(`{}`))
			r.Header.Set("Origin", "https://evil.example")
			r.Header.Set(csrfHeader, strings.Repeat("a", 64))
			r.AddCookie(&http.Cookie{Name: csrfCookie, Value: strings.Repeat("a", 64)})
			return r
		},
	} {
		res, err := http.DefaultClient.Do(req())
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("%s: status %d; want 403", name, res.StatusCode)
		}
	}
	if _, paused, _ := consumer.ReadPause(bg, c, "orders"); paused {
		t.Errorf("a forged request paused the group")
	}

	// Read-only: no action shown, every action refused.
	ro := newWebServer(c, "orders", "")
	ro.readOnly = true
	roWeb := httptest.NewServer(ro.handler())
	defer roWeb.Close()
	defer ro.Close()
	if err := writeDeadLetter(c, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(roWeb.URL+"/g/orders"),
		poll(`document.querySelectorAll("#dead tbody tr[data-letter]").length === 1 && document.getElementById("control-note").textContent.includes("read-only")`)); err != nil {
		t.Fatalf("the read-only page: %v", err)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('button[data-action^="replay:"], button[data-action^="delete:"]').length + (document.getElementById("pause-form").hidden ? 0 : 1) + (document.getElementById("resume").hidden ? 0 : 1)`)); err != nil || n != 0 {
		t.Errorf("the read-only page shows %d actions (%v); want none", n, err)
	}
	req, _ := http.NewRequest("POST", roWeb.URL+"/api/g/orders/pause", strings.NewReader(`{}`))
	req.Header.Set("Origin", roWeb.URL)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("an action on a read-only server: status %d; want 403", res.StatusCode)
	}
}

// writeDeadLetter writes one dead letter of group.
func writeDeadLetter(c redis.Cmdable, group string) error {
	return deadletter.RedisStream(c, deadletter.Stream(group), deadletter.Options{})(context.Background(), &transport.Message{Key: "9", Payload: []byte("x")}, errors.New("550"))
}

// With a token, a script that sends it as a bearer token acts without the
// page's CSRF token (a browser never adds that header by itself); one that
// has only the token's cookie must be the page.
func TestWebActionsWithABearerToken(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	bg := context.Background()
	if err := writeDeadLetter(c, "g"); err != nil { // a group to act on
		t.Fatal(err)
	}
	ws := newWebServer(c, "", "s3cret")
	web := httptest.NewServer(ws.handler())
	defer web.Close()
	defer ws.Close()
	post := func(path string, set func(*http.Request)) int {
		req, _ := http.NewRequest("POST", web.URL+path, strings.NewReader(`{"reason":"maintenance"}`))
		set(req)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := post("/api/g/g/pause", func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "nandi_token", Value: "s3cret"}) }); code != http.StatusForbidden {
		t.Errorf("the token's cookie alone, no CSRF token: status %d; want 403", code)
	}
	if _, paused, _ := consumer.ReadPause(bg, c, "g"); paused {
		t.Fatal("a request with the cookie alone paused the group")
	}
	if code := post("/api/g/g/pause", func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") }); code != http.StatusOK {
		t.Errorf("a bearer token: status %d; want 200", code)
	}
	if st, paused, _ := consumer.ReadPause(bg, c, "g"); !paused || st.Reason != "maintenance" {
		t.Errorf("after a bearer token's pause: paused %v (%+v); want paused for maintenance", paused, st)
	}
	if code := post("/api/g/g/resume", func(r *http.Request) { r.Header.Set("Authorization", "Bearer wrong") }); code != http.StatusUnauthorized {
		t.Errorf("a wrong bearer token: status %d; want 401", code)
	}
}
