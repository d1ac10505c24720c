package main

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed web
var webFiles embed.FS

// EnvWebToken is read when -token is not given.
const EnvWebToken = "NANDI_WEB_TOKEN"

// maxGroups bounds how many groups one server watches (each is polled
// from the first time it is asked for until the server stops).
const maxGroups = 64

// maxStreams bounds the event streams (open pages) one server serves at
// once; beyond it a page is answered 503 and says why.
const maxStreams = 256

// idleTimeout closes a keep-alive connection that has sent no request for
// that long (an open page's event stream is not idle).
var idleTimeout = 2 * time.Minute

// webServer serves the pages of nandi web, and their actions (unless
// read-only).
type webServer struct {
	c     redis.UniversalClient
	group string // the group / redirects to, if any
	token string
	// listen is the address the server listens on: without a token, a
	// request must name it, localhost or a loopback address as its Host.
	listen string
	// tlsProxy says a proxy in front terminates TLS: the token's cookie is
	// Secure although this server speaks plain HTTP.
	tlsProxy bool
	// readOnly: the server takes no action (-read-only).
	readOnly bool

	streams    atomic.Int64 // event streams open
	maxStreams int

	mu       sync.Mutex
	trackers map[string]*tracker

	ctx    context.Context // ends at Close: pollers and event streams stop
	cancel context.CancelFunc
	wg     sync.WaitGroup // the pollers
}

func newWebServer(c redis.UniversalClient, group, token string) *webServer {
	ctx, cancel := context.WithCancel(context.Background())
	return &webServer{c: c, group: group, token: token, trackers: map[string]*tracker{}, ctx: ctx, cancel: cancel, maxStreams: maxStreams}
}

// httpServer returns the http.Server that serves s: headers read within
// 5s, idle keep-alive connections closed after idleTimeout.
func (s *webServer) httpServer() *http.Server {
	return &http.Server{Handler: s.handler(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: idleTimeout}
}

// Close stops the pollers and ends every event stream, so that a server's
// Shutdown (which waits for connections to go idle, and a stream never
// does) returns.
func (s *webServer) Close() {
	s.cancel()
	s.wg.Wait()
}

// errTooManyGroups is answered past maxGroups.
var errTooManyGroups = fmt.Errorf("this server already watches %d groups; start another nandi web for more", maxGroups)

// tracker returns the group's tracker, starting its poller the first
// time. A group is watched when it has any of its keys (a stopped group
// with dead letters or checkpoints, a paused one with no worker, as
// nandi groups finds them); a name with none is not: *noSuchGroup.
func (s *webServer) tracker(ctx context.Context, group string) (*tracker, error) {
	s.mu.Lock()
	tk := s.trackers[group]
	n := len(s.trackers)
	s.mu.Unlock()
	if tk != nil {
		return tk, nil
	}
	if n >= maxGroups {
		return nil, errTooManyGroups
	}
	if err := checkGroup(ctx, s.c, group); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if tk = s.trackers[group]; tk != nil {
		return tk, nil
	}
	if s.ctx.Err() != nil {
		return nil, s.ctx.Err()
	}
	tk = newTracker(group)
	s.trackers[group] = tk
	s.wg.Go(func() { tk.run(s.ctx, s.c) })
	return tk, nil
}

// trackerOr answers the error of finding the group's tracker, if any.
func (s *webServer) trackerOr(w http.ResponseWriter, r *http.Request) *tracker {
	tk, err := s.tracker(r.Context(), r.PathValue("group"))
	var none *noSuchGroup
	switch {
	case errors.As(err, &none):
		http.Error(w, "nandi web: "+err.Error(), http.StatusNotFound)
	case errors.Is(err, errTooManyGroups):
		http.Error(w, "nandi web: "+err.Error(), http.StatusServiceUnavailable)
	case err != nil:
		http.Error(w, "nandi web: reading the group: "+err.Error(), http.StatusBadGateway)
	}
	return tk
}

// handler returns the server's routes, behind the token when there is one.
func (s *webServer) handler() http.Handler {
	static, _ := fs.Sub(webFiles, "web")
	mux := http.NewServeMux()
	page := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" && s.group != "" {
			http.Redirect(w, r, "/g/"+url.PathEscape(s.group), http.StatusFound)
			return
		}
		http.ServeFileFS(w, r, static, "index.html")
	}
	mux.HandleFunc("GET /{$}", page)
	mux.HandleFunc("GET /g/{group}", page)
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /api/groups", s.groups)
	mux.HandleFunc("GET /api/g/{group}", s.snapshot)
	mux.HandleFunc("GET /api/g/{group}/events", s.events)
	mux.HandleFunc("GET /api/session", s.session)
	mux.HandleFunc("GET /api/g/{group}/dead/{id}", s.letter)
	mux.HandleFunc("POST /api/g/{group}/pause", s.action(s.pause))
	mux.HandleFunc("POST /api/g/{group}/resume", s.action(s.resume))
	mux.HandleFunc("POST /api/g/{group}/dead/{id}/replay", s.action(s.replayLetter))
	mux.HandleFunc("POST /api/g/{group}/dead/{id}/delete", s.action(s.deleteLetter))
	return s.guard(mux)
}

// guard sets the headers every answer carries. Without a token it
// answers only requests addressed to this machine by a name a web page
// elsewhere cannot take over (localhost, a loopback address, the listen
// address): a page that rebinds its own name to 127.0.0.1 (DNS
// rebinding) sends its own Host, and is answered 421. With a token it
// requires it: an Authorization: Bearer header, or the cookie that a
// first visit with ?token= sets.
func (s *webServer) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		if s.token == "" {
			if !s.localHost(r.Host) {
				http.Error(w, fmt.Sprintf("nandi web: without a token this server answers only requests to localhost, a loopback address or %s, not to %q; open it by one of those, or run it with %s set", s.listenOr("its listen address"), r.Host, EnvWebToken), http.StatusMisdirectedRequest)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if q := r.URL.Query().Get("token"); q != "" && s.match(q) {
			http.SetCookie(w, &http.Cookie{Name: "nandi_token", Value: q, Path: "/", HttpOnly: true, Secure: r.TLS != nil || s.tlsProxy, SameSite: http.SameSiteStrictMode})
			// The same page without the token, on this server: a path is
			// never let become another host's URL (//evil.example/x is one).
			target := "/" + strings.TrimLeft(r.URL.EscapedPath(), "/\\")
			v := r.URL.Query()
			v.Del("token")
			if len(v) > 0 {
				target += "?" + v.Encode()
			}
			http.Redirect(w, r, target, http.StatusFound)
			return
		}
		given := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if c, err := r.Cookie("nandi_token"); given == "" && err == nil {
			given = c.Value
		}
		if !s.match(given) {
			h.Set("WWW-Authenticate", `Bearer realm="nandi"`)
			http.Error(w, "nandi web: a token is required: send Authorization: Bearer TOKEN, or open the page once with ?token=TOKEN", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// localHost reports whether a request's Host names this machine by a name
// no one else can point elsewhere.
func (s *webServer) localHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	if lh, _, err := net.SplitHostPort(s.listen); err == nil && lh != "" && strings.EqualFold(host, lh) {
		return true
	}
	return false
}

func (s *webServer) listenOr(what string) string {
	if s.listen != "" {
		return s.listen
	}
	return what
}

func (s *webServer) match(given string) bool {
	return given != "" && subtleEqual(given, s.token)
}

func subtleEqual(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// groups lists every group nandi groups finds: any of a group's keys
// (lease, checkpoints, dead letters, pause, workers).
func (s *webServer) groups(w http.ResponseWriter, r *http.Request) {
	names, err := findGroups(r.Context(), s.c, groupSuffixes)
	if err != nil {
		http.Error(w, "nandi web: "+err.Error(), http.StatusBadGateway)
		return
	}
	writeJSON(w, names)
}

// snapshot answers the group's latest snapshot as JSON.
func (s *webServer) snapshot(w http.ResponseWriter, r *http.Request) {
	tk := s.trackerOr(w, r)
	if tk == nil {
		return
	}
	for {
		snap, changed := tk.current()
		if snap != nil {
			writeJSON(w, snap)
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			http.Error(w, "nandi web: stopping", http.StatusServiceUnavailable)
			return
		case <-changed:
		}
	}
}

// events streams the group's snapshots as server-sent events, each as
// its poller reads it, until the client goes or the server stops.
func (s *webServer) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "nandi web: streaming unsupported", http.StatusInternalServerError)
		return
	}
	if s.streams.Add(1) > int64(s.maxStreams) {
		s.streams.Add(-1)
		http.Error(w, fmt.Sprintf("nandi web: %d pages are open on this server, the most it serves at once; close some, or run another nandi web", s.maxStreams), http.StatusServiceUnavailable)
		return
	}
	defer s.streams.Add(-1)
	tk := s.trackerOr(w, r)
	if tk == nil {
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	var sent *Snapshot
	for {
		snap, changed := tk.current()
		if snap != nil && snap != sent {
			b, err := json.Marshal(snap)
			if err != nil { // say so on the page rather than end the stream
				b, _ = json.Marshal(Snapshot{Group: snap.Group, Error: "nandi web: encoding the snapshot: " + err.Error(), At: snap.At})
			}
			if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
				return
			}
			fl.Flush()
			sent = snap
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		case <-changed:
		}
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil { // a value JSON cannot carry (NaN, Inf): say so, never an empty 200
		http.Error(w, "nandi web: encoding the answer: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(b, '\n'))
}

// loopback reports whether addr listens on this machine only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// cmdWeb serves the pages until ctx ends.
func cmdWeb(ctx context.Context, args []string, out, errOut io.Writer) int {
	fs := newFlags("web", out, errOut)
	rawURL := fs.redisURL("the groups' Redis")
	addr := fs.String("addr", "127.0.0.1:8080", "listen address; beyond localhost it needs -token")
	group := fs.String("group", "", "open this group's page at /")
	token := fs.String("token", os.Getenv(EnvWebToken), "require this bearer token (default $"+EnvWebToken+"; prefer the variable: a flag's value is visible to every user of the machine in ps)")
	cert := fs.String("tls-cert", "", "serve HTTPS with this certificate (PEM; with -tls-key)")
	key := fs.String("tls-key", "", "the certificate's private key (PEM)")
	tlsProxy := fs.Bool("tls-proxy", false, "a proxy in front (an ingress) terminates TLS: mark the token's cookie Secure")
	readOnly := fs.Bool("read-only", false, "take no action: the page only shows (for wide audiences); without it the page can pause and resume the group and replay or delete dead letters")
	if code, ok := fs.parse(args); !ok {
		return code
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "token" {
			fmt.Fprintf(errOut, "nandi web: -token is visible to every user of this machine (ps); set %s instead\n", EnvWebToken)
		}
	})
	if (*cert == "") != (*key == "") {
		return fs.usageError("-tls-cert and -tls-key go together: give both to serve HTTPS, or neither")
	}
	if !loopback(*addr) && *token == "" {
		return fs.usageError("-addr %s listens beyond localhost: set -token (or %s) so that only those who have it can read the fleet", *addr, EnvWebToken)
	}
	c, code := fs.connected(ctx, *rawURL)
	if c == nil {
		return code
	}
	defer c.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fs.failed(err)
	}
	ws := newWebServer(c, *group, *token)
	ws.listen, ws.tlsProxy, ws.readOnly = ln.Addr().String(), *tlsProxy, *readOnly
	if host, _, err := net.SplitHostPort(*addr); err == nil && host != "" && !strings.EqualFold(host, "localhost") && net.ParseIP(host) == nil {
		ws.listen = *addr // a name given to listen on is one the operator chose
	}
	srv := ws.httpServer()
	srv.RegisterOnShutdown(ws.Close)
	defer ws.Close()
	if *group != "" {
		// Watch it from now on, so that its strip starts before the first page.
		if _, err := ws.tracker(ctx, *group); err != nil {
			fmt.Fprintln(errOut, "nandi web:", err)
		}
	}
	scheme := "http"
	if *cert != "" {
		scheme = "https"
	}
	mode := "pause, resume and dead letters from the page"
	if *readOnly {
		mode = "read-only"
	}
	fmt.Fprintf(out, "nandi web: serving %s://%s/ (%s)\n", scheme, ln.Addr(), mode)
	done := make(chan error, 1)
	go func() {
		if *cert != "" {
			done <- srv.ServeTLS(ln, *cert, *key)
			return
		}
		done <- srv.Serve(ln)
	}()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			fmt.Fprintln(errOut, "nandi web: stopping:", err)
		}
		<-done
		return 0
	case err := <-done:
		fmt.Fprintln(errOut, "nandi web:", err)
		return 1
	}
}
