package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"io"
	"io/fs"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/deadletter"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
	"github.com/redis/go-redis/v9"
)

// markup is a worker id that a page which let it through as HTML would
// turn into an element.
const markup = `<img src=x onerror=alert(1)>`

// browser returns a headless Chromium context (Debian's chromium, which
// .ci/run installs); the test fails, saying how to get one, when there is
// none.
func browser(t *testing.T) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test needs Chromium and a real redis-server; make test runs it")
	}
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Fatal("no Chromium on PATH: install Debian's chromium (apt-get install -y chromium); .ci/run does")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1360, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx
}

// writes records every write command the web server's client sends.
type writes struct {
	mu   sync.Mutex
	cmds []string
}

var readOnly = map[string]bool{"ping": true, "evalsha": true, "eval": true, "evalsha_ro": true, "eval_ro": true,
	"zrangebyscore": true, "mget": true, "get": true, "xlen": true, "xrevrange": true, "scan": true, "exists": true, "info": true, "hello": true, "client": true, "script": true}

func (w *writes) DialHook(next redis.DialHook) redis.DialHook { return next }
func (w *writes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		w.note(cmd)
		return next(ctx, cmd)
	}
}
func (w *writes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			w.note(c)
		}
		return next(ctx, cmds)
	}
}
func (w *writes) note(c redis.Cmder) {
	name := strings.ToLower(c.Name())
	if name == "script" && len(c.Args()) > 1 && strings.EqualFold(fmt.Sprint(c.Args()[1]), "flush") {
		name = "script flush"
	}
	if !readOnly[name] {
		w.mu.Lock()
		w.cmds = append(w.cmds, name)
		w.mu.Unlock()
	}
}

// The page in a real browser (headless Chromium), against a group on a
// real redis-server: 3 rows with the right workers; a fourth worker joins
// and the page shows 4 rows and a rebalance mark without a reload; the
// worker whose id is markup shows as text; the server sends no write
// command. It saves a screenshot (into docs/ with NANDI_SCREENSHOT=1).
func TestWebPageInABrowser(t *testing.T) {
	ctx := browser(t)
	// The page's strip marks an interval handed over by the lease's
	// timing (a source that is not a log, a group's first change); over a
	// log the fenced handoff lasts a drain, too short to be sure to land
	// in a presence record, so this group hands over by timing.
	srv := redistest.Start(t)
	const iv = 300 * time.Millisecond
	log := memory.NewLog(2)
	for i := range 400 {
		log.Append(fmt.Sprint(i), nil)
	}
	g := newTestGroup(t, srv.Client(), "mail-sender", iv, log, func(ctx context.Context, m *transport.Message) error {
		if m.Key == "13" {
			return fmt.Errorf("smtp: 451 4.7.1 greylisted, try again later")
		}
		return nil
	}, consumer.Options{RetryMin: 500 * time.Millisecond, NoFencedHandoff: true})
	for _, id := range []string{"mail-sender-7f9c-a", "mail-sender-7f9c-b", markup} {
		g.start(id)
	}

	wr := &writes{}
	webClient := srv.Client()
	webClient.AddHook(wr)
	ws := newWebServer(webClient, "mail-sender", "")
	web := httptest.NewServer(ws.handler())
	defer web.Close()
	defer ws.Close() // before web.Close, which waits for the page's event stream

	poll := func(expr string, within time.Duration) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(within))
	}
	rows := func(n int) chromedp.Action[chromedp.Void] {
		return poll(fmt.Sprintf(`document.querySelectorAll("#mapping tbody tr[data-worker]").length === %d`, n), 20*time.Second)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(web.URL+"/"), // redirects to /g/mail-sender
		rows(3),
		chromedp.Evaluate[chromedp.Void](`window.__loaded = 1`),
	); err != nil {
		t.Fatalf("the page never showed 3 rows: %v", err)
	}
	workers, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#mapping tbody tr td.worker")).map(e => e.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(workers, "|")
	for _, want := range []string{"mail-sender-7f9c-a", "mail-sender-7f9c-b", markup} {
		if !strings.Contains(got, want) {
			t.Errorf("the mapping's workers are %q; want %q among them", got, want)
		}
	}
	if imgs, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("main img").length`)); err != nil || imgs != 0 {
		t.Errorf("the markup worker id became %d elements (%v); want text", imgs, err)
	}

	screenshot := os.Getenv("NANDI_SCREENSHOT") != ""
	if screenshot { // a strip worth looking at in the guide
		time.Sleep(40 * iv)
	}
	g.start("mail-sender-7f9c-d")
	if err := chromedp.Do(ctx, rows(4), poll(`document.querySelectorAll("#strip .cell.rebalance").length > 0`, 10*time.Second),
		poll(`document.querySelectorAll("#strip .cell.handover").length > 0`, 10*time.Second),
		poll(`Array.from(document.querySelectorAll("#changes li.rebalance")).some(li => /3 \u2192 4.*joined: mail-sender-7f9c-d/.test(li.textContent))`, 10*time.Second)); err != nil {
		t.Fatalf("after a fourth worker joined, the page never showed 4 rows, a rebalance mark, a stand-down and the change 3 -> 4 with who joined: %v", err)
	}
	if loaded, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.__loaded || 0`)); err != nil || loaded != 1 {
		t.Errorf("the page was reloaded to show the change; want it live")
	}
	// The failing task's error shows in its owner's row, highlighted.
	if err := chromedp.Do(ctx, poll(`Array.from(document.querySelectorAll("#mapping tr.failing")).some(r => r.textContent.includes("greylisted"))`, 10*time.Second)); err != nil {
		t.Errorf("the failing task's error is not shown highlighted: %v", err)
	}

	// A dead letter shows in its section, its error as text.
	dead := deadletter.RedisStream(srv.Client(), deadletter.Stream("mail-sender"), deadletter.Options{})
	if err := dead(context.Background(), &transport.Message{Key: "99", Payload: []byte("x")}, errors.New("550 no such user "+markup)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, poll(`!document.getElementById("dead-wrap").hidden && Array.from(document.querySelectorAll("#dead tbody tr")).some(r => r.textContent.includes("550 no such user") && r.textContent.includes("99"))`, 10*time.Second)); err != nil {
		t.Errorf("the dead letter is not shown: %v", err)
	}
	if imgs, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("main img").length`)); err != nil || imgs != 0 {
		t.Errorf("the dead letter's markup became %d elements (%v); want text", imgs, err)
	}

	if screenshot {
		time.Sleep(20 * iv)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil || img.Bounds().Dx() < 800 {
		t.Fatalf("the screenshot is not a page-sized PNG: %v", err)
	}
	dir := t.TempDir()
	if screenshot {
		dir = filepath.Join("..", "..", "docs")
	}
	if err := os.WriteFile(filepath.Join(dir, "nandi-web.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes, %dx%d)", filepath.Join(dir, "nandi-web.png"), len(shot), img.Bounds().Dx(), img.Bounds().Dy())

	wr.mu.Lock()
	defer wr.mu.Unlock()
	if len(wr.cmds) > 0 {
		t.Errorf("nandi web sent commands that are not reads: %v", wr.cmds)
	}
}

// The token: required beyond localhost (the command refuses to start
// without one), checked in constant time, from a header or from the
// cookie a first visit with ?token= sets.
func TestWebToken(t *testing.T) {
	if code, _, errOut := nandi(t, context.Background(), "web", "-redis", "redis://127.0.0.1:1", "-addr", "0.0.0.0:0"); code != 2 || !strings.Contains(errOut, "-token") {
		t.Errorf("web on every interface without a token: exit %d, %q; want 2 and -token named", code, errOut)
	}
	web := httptest.NewServer(newWebServer(nil, "", "s3cret").handler())
	defer web.Close()
	get := func(path string, h map[string]string) *http.Response {
		req, _ := http.NewRequest("GET", web.URL+path, nil)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	if res := get("/static/app.js", nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token: %d; want 401", res.StatusCode)
	}
	if res := get("/static/app.js", map[string]string{"Authorization": "Bearer wrong"}); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d; want 401", res.StatusCode)
	}
	if res := get("/static/app.js", map[string]string{"Authorization": "Bearer s3cret"}); res.StatusCode != http.StatusOK ||
		!strings.Contains(res.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Errorf("the right token: %d, CSP %q; want 200 and a CSP", res.StatusCode, res.Header.Get("Content-Security-Policy"))
	}
	res := get("/g/x?token=s3cret", nil)
	if res.StatusCode != http.StatusFound || len(res.Cookies()) != 1 || !res.Cookies()[0].HttpOnly || strings.Contains(res.Header.Get("Location"), "token") {
		t.Fatalf("?token=: %d, cookies %v, location %q; want a redirect without the token, setting an HttpOnly cookie", res.StatusCode, res.Cookies(), res.Header.Get("Location"))
	}
	if res := get("/static/app.js", map[string]string{"Cookie": "nandi_token=s3cret"}); res.StatusCode != http.StatusOK {
		t.Errorf("the cookie: %d; want 200", res.StatusCode)
	}
	if res.Cookies()[0].Secure {
		t.Error("the cookie over plain HTTP is Secure: the browser would never send it back")
	}

	// Over HTTPS the cookie is Secure.
	tlsWeb := httptest.NewTLSServer(newWebServer(nil, "", "s3cret").handler())
	defer tlsWeb.Close()
	client := tlsWeb.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	tres, err := client.Get(tlsWeb.URL + "/g/x?token=s3cret")
	if err != nil {
		t.Fatal(err)
	}
	tres.Body.Close()
	if len(tres.Cookies()) != 1 || !tres.Cookies()[0].Secure {
		t.Errorf("?token= over HTTPS set %v; want one Secure cookie", tres.Cookies())
	}
	if code, _, errOut := nandi(t, context.Background(), "web", "-redis", "redis://127.0.0.1:1", "-tls-cert", "c.pem"); code != 2 || !strings.Contains(errOut, "-tls-key") {
		t.Errorf("-tls-cert without -tls-key: exit %d, %q; want 2, naming -tls-key", code, errOut)
	}
}

// A group that does not exist is answered 404 with what is missing, and
// is not watched (no poller is started for it).
func TestWebUnknownGroup(t *testing.T) {
	srv := redistest.Start(t)
	ws := newWebServer(srv.Client(), "", "")
	web := httptest.NewServer(ws.handler())
	defer web.Close()
	defer ws.Close()
	for _, path := range []string{"/api/g/nope", "/api/g/nope/events"} {
		res, err := http.Get(web.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `no group "nope"`) {
			t.Errorf("GET %s: %d %q; want 404 saying there is no such group", path, res.StatusCode, body)
		}
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if len(ws.trackers) != 0 {
		t.Errorf("%d groups watched; want none", len(ws.trackers))
	}
}

// The page needs nothing from the internet: no file it is made of names
// another origin, and the CSP allows only its own.
func TestWebNothingFetched(t *testing.T) {
	var total int
	err := fs.WalkDir(webFiles, "web", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := webFiles.ReadFile(path)
		if err != nil {
			return err
		}
		total += len(b)
		for _, origin := range []string{"http:", "https:", `src="//`, `href="//`, "url(//", "@import"} {
			if bytes.Contains(b, []byte(origin)) {
				t.Errorf("%s names another origin (%q)", path, origin)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if total == 0 {
		t.Fatal("no embedded page")
	}
	t.Logf("the page is %d bytes (html, js, css)", total)
}

// lineWriter hands each write to a channel (the command's output, read
// while it runs).
type lineWriter chan string

func (w lineWriter) Write(p []byte) (int, error) { w <- string(p); return len(p), nil }

// nandi web as a command: it serves the group list and a group's event
// stream, and stops when asked even with a page still streaming.
func TestWebCommand(t *testing.T) {
	srv := redistest.Start(t)
	log := memory.NewLog(1)
	g := newTestGroup(t, srv.Client(), "webhooks", 200*time.Millisecond, log,
		func(context.Context, *transport.Message) error { return nil }, consumer.Options{})
	g.start("w1")
	redistest.WaitFor(t, 10*time.Second, "the worker to hold", func() bool { return g.holding(1) })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(lineWriter, 10)
	var errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- cmdWeb(ctx, []string{"-redis", "redis://" + srv.Addr(), "-addr", "127.0.0.1:0", "-group", "webhooks"}, out, &errOut)
	}()
	var base string
	select {
	case line := <-out:
		_, rest, _ := strings.Cut(line, "serving ")
		base = strings.TrimSuffix(strings.Fields(rest)[0], "/")
	case code := <-done:
		t.Fatalf("nandi web exited %d: %s", code, errOut.String())
	}

	res, err := http.Get(base + "/api/groups")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if strings.TrimSpace(string(b)) != `["webhooks"]` {
		t.Errorf("/api/groups: %s; want [\"webhooks\"]", b)
	}
	res, err = http.Get(base + "/api/g/webhooks/events")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	first := make([]byte, 4096)
	n, _ := io.ReadAtLeast(res.Body, first, len("data: {"))
	if !strings.HasPrefix(string(first[:n]), `data: {"group":"webhooks"`) {
		t.Errorf("the event stream began %q; want a snapshot of webhooks", first[:n])
	}

	cancel() // with the stream still open
	select {
	case code := <-done:
		if code != 0 || errOut.Len() > 0 {
			t.Errorf("nandi web exited %d after its context ended, saying %q; want 0, and a shutdown no open page holds up", code, errOut.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nandi web did not stop within 5s of its context's end with a page streaming")
	}
}

// docs/cli.md gives the size of the page, its script and style: the
// embedded files' (said to within 0.5 KB).
func TestWebPageSizeIsAsDocumented(t *testing.T) {
	var total int64
	err := fs.WalkDir(webFiles, "web", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		total += info.Size()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`the page, its script and style \(([\d.]+) KB`).FindSubmatch(b)
	if m == nil {
		t.Fatal(`docs/cli.md no longer says "the page, its script and style (N KB"`)
	}
	said, _ := strconv.ParseFloat(string(m[1]), 64)
	if got := float64(total) / 1000; math.Abs(got-said) > 0.5 {
		t.Errorf("docs/cli.md says the page is %.1f KB; the embedded files are %d bytes (%.1f KB)", said, total, got)
	}
}
