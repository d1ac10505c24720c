package redistest

import (
	"net"
	"sync"
	"testing"
)

// Link is a TCP link in front of a server, on an ephemeral loopback port,
// that can stop carrying bytes: Hold makes every connection through it
// drop what it reads in both directions without closing (a connection
// that stopped answering), Release lets bytes through again. It is closed,
// with every connection through it, when the test ends. It uses nothing
// but the standard library, so that the tests of the packages users
// import need no proxy of their own (internal/faultproxy has more faults,
// for the integration suites).
type Link struct {
	ln       net.Listener
	upstream string

	mu    sync.Mutex
	held  bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewLink starts a link to upstream.
func NewLink(t testing.TB, upstream string) *Link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: a link: %v", err)
	}
	l := &Link{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	l.wg.Go(l.accept)
	t.Cleanup(l.close)
	return l
}

// Addr is where clients connect.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Hold drops every byte in both directions until Release.
func (l *Link) Hold() { l.set(true) }

// Release undoes Hold.
func (l *Link) Release() { l.set(false) }

func (l *Link) set(held bool) {
	l.mu.Lock()
	l.held = held
	l.mu.Unlock()
}

func (l *Link) isHeld() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

func (l *Link) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", l.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !l.track(c, up) {
			return
		}
		l.wg.Go(func() { l.pipe(up, c) })
		l.wg.Go(func() { l.pipe(c, up) })
	}
}

// track remembers a connection's two ends; false once the link is closed.
func (l *Link) track(cs ...net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conns == nil {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		l.conns[c] = struct{}{}
	}
	return true
}

// pipe copies from src to dst, dropping what it reads while held; when
// either side ends, both are closed.
func (l *Link) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !l.isHeld() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (l *Link) close() {
	_ = l.ln.Close()
	l.mu.Lock()
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
	l.wg.Wait()
}
