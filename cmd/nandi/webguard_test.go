package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
)

// noRedirect is a client that returns redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// Without a token, a request must be addressed to localhost, a loopback
// address or the listen address: a web page that rebinds its own name to
// 127.0.0.1 (DNS rebinding) sends its own Host and is answered 421. It
// was answered 200, with worker ids, host names and handlers' errors.
func TestWebWithoutTokenAnswersOnlyLocalHosts(t *testing.T) {
	ws := newWebServer(nil, "", "")
	web := httptest.NewServer(ws.handler())
	defer web.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(web.URL, "http://"))
	ws.listen = "nandi.internal:" + port
	for host, want := range map[string]int{
		"attacker.example":           http.StatusMisdirectedRequest,
		"attacker.example:" + port:   http.StatusMisdirectedRequest,
		"localhost.attacker.example": http.StatusMisdirectedRequest,
		"127.0.0.1.nip.io:" + port:   http.StatusMisdirectedRequest,
		"localhost:" + port:          http.StatusOK,
		"LOCALHOST:" + port:          http.StatusOK,
		"127.0.0.1:" + port:          http.StatusOK,
		"[::1]:" + port:              http.StatusOK,
		"nandi.internal:" + port:     http.StatusOK, // the listen address
		"localhost":                  http.StatusOK,
	} {
		req, _ := http.NewRequest("GET", web.URL+"/static/app.js", nil)
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("Host %q: %d; want %d", host, res.StatusCode, want)
		}
		if want == http.StatusMisdirectedRequest && !strings.Contains(string(body), EnvWebToken) {
			t.Errorf("Host %q: %q; want a message that says how to open the page", host, body)
		}
	}
	// With a token, any Host: the token is what is checked.
	tws := newWebServer(nil, "", "s3cret")
	tweb := httptest.NewServer(tws.handler())
	defer tweb.Close()
	req, _ := http.NewRequest("GET", tweb.URL+"/static/app.js", nil)
	req.Host = "nandi.example.com"
	req.Header.Set("Authorization", "Bearer s3cret")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("with the token and another Host: %d; want 200", res.StatusCode)
	}
}

// ?token= redirects to the same page on this server, whatever the path:
// //evil.example/x redirected to another host.
func TestWebTokenRedirectStaysOnTheServer(t *testing.T) {
	web := httptest.NewServer(newWebServer(nil, "", "s3cret").handler())
	defer web.Close()
	for _, path := range []string{"//evil.example/x", "/\\evil.example/x", "///evil.example", "/g/mail?token=s3cret&a=1"} {
		raw := web.URL + path
		if !strings.Contains(path, "?") {
			raw += "?token=s3cret"
		}
		req, err := http.NewRequest("GET", raw, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		loc := res.Header.Get("Location")
		u, err := url.Parse(loc)
		if res.StatusCode != http.StatusFound || err != nil || u.Host != "" || u.Scheme != "" || !strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") || strings.HasPrefix(loc, "/\\") || strings.Contains(loc, "token") {
			t.Errorf("GET %s: %d, Location %q; want 302 to a path on this server, without the token", path, res.StatusCode, loc)
		}
	}
}

// Behind a proxy that terminates TLS (-tls-proxy) the cookie is Secure,
// though this server speaks plain HTTP.
func TestWebCookieSecureBehindATLSProxy(t *testing.T) {
	ws := newWebServer(nil, "", "s3cret")
	ws.tlsProxy = true
	web := httptest.NewServer(ws.handler())
	defer web.Close()
	res, err := noRedirect.Get(web.URL + "/g/x?token=s3cret")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if len(res.Cookies()) != 1 || !res.Cookies()[0].Secure {
		t.Errorf("?token= behind a TLS proxy set %v; want one Secure cookie", res.Cookies())
	}
}

// A keep-alive connection that sends nothing more is closed after the
// idle timeout; it was kept open for ever.
func TestWebClosesIdleConnections(t *testing.T) {
	defer func(d time.Duration) { idleTimeout = d }(idleTimeout)
	idleTimeout = 300 * time.Millisecond
	srv := newWebServer(nil, "", "").httpServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	defer func() { _ = srv.Close(); <-done }()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /static/app.js HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET: %d", res.StatusCode)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = br.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("an idle keep-alive connection was still open after 30s; want it closed after the idle timeout")
	}
	if !errors.Is(err, io.EOF) {
		t.Fatalf("reading an idle connection: %v; want the server to close it (EOF)", err)
	}
}

// The event streams open at once are bounded: past the bound a page gets
// 503 saying why; a stream that ends makes room.
func TestWebBoundsEventStreams(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client()
	defer c.Close()
	ctx := context.Background()
	if err := c.HSet(ctx, partition.Key("g"), "interval_us", 200000, "gap_ppm", 125000).Err(); err != nil {
		t.Fatal(err)
	}
	ws := newWebServer(c, "", "")
	ws.maxStreams = 2
	web := httptest.NewServer(ws.handler())
	defer web.Close()
	defer ws.Close()
	open := func() (*http.Response, context.CancelFunc) {
		sctx, cancel := context.WithCancel(ctx)
		req, _ := http.NewRequestWithContext(sctx, "GET", web.URL+"/api/g/g/events", nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res, cancel
	}
	r1, c1 := open()
	defer c1()
	r2, c2 := open()
	defer c2()
	if r1.StatusCode != http.StatusOK || r2.StatusCode != http.StatusOK {
		t.Fatalf("the first two streams: %d, %d; want 200", r1.StatusCode, r2.StatusCode)
	}
	r3, c3 := open()
	body, _ := io.ReadAll(r3.Body)
	c3()
	if r3.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "2 pages are open") {
		t.Fatalf("a third stream past the bound of 2: %d %q; want 503 saying why", r3.StatusCode, body)
	}
	c1()
	r1.Body.Close()
	redistest.WaitFor(t, 10*time.Second, "the ended stream to make room", func() bool { return ws.streams.Load() < 2 })
	r4, c4 := open()
	defer c4()
	if r4.StatusCode != http.StatusOK {
		t.Errorf("a stream after one ended: %d; want 200", r4.StatusCode)
	}
}

// -token is visible in ps: nandi web says so and names the variable.
func TestWebTokenFlagWarns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, _, errOut := nandi(t, ctx, "web", "-token", "x", "-addr", "127.0.0.1:0", "-redis", "redis://127.0.0.1:1")
	if !strings.Contains(errOut, "ps") || !strings.Contains(errOut, EnvWebToken) {
		t.Errorf("web -token: %q; want a warning that names %s", errOut, EnvWebToken)
	}
}
