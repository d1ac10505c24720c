// Package faultproxy is an in-process toxiproxy in front of one server, so
// that a test can fault one client's link per direction: hold every byte,
// drop replies, add latency, move it to another server. The integration
// and chaos suites use it; packages users import use redistest.Link, so
// that toxiproxy is not a dependency of their tests.
package faultproxy

import (
	"net/http/httptest"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	toxiclient "github.com/Shopify/toxiproxy/v2/client"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

// Proxy is an in-process toxiproxy in front of one upstream, so a test can
// fault one worker's link per direction.
type Proxy struct {
	t    testing.TB
	p    *toxiclient.Proxy
	addr string
}

// New starts a proxy to upstream on an ephemeral loopback port; it is
// stopped when the test ends.
func New(t testing.TB, upstream string) *Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	api := httptest.NewServer(srv.Routes())
	c := toxiclient.NewClient(api.URL)
	p, err := c.CreateProxy("redis", "127.0.0.1:0", upstream)
	if err != nil {
		api.Close()
		t.Fatalf("faultproxy: creating a proxy: %v", err)
	}
	t.Cleanup(func() {
		_ = p.Delete()
		api.Close()
	})
	return &Proxy{t: t, p: p, addr: p.Listen}
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) add(name, typ, stream string, attrs toxiclient.Attributes) {
	p.t.Helper()
	if _, err := p.p.AddToxic(name, typ, stream, 1, attrs); err != nil {
		p.t.Fatalf("faultproxy: adding toxic %s: %v", name, err)
	}
}

// Remove removes a fault by name.
func (p *Proxy) Remove(name string) {
	p.t.Helper()
	if err := p.p.RemoveToxic(name); err != nil {
		p.t.Fatalf("faultproxy: removing toxic %s: %v", name, err)
	}
}

// Hold makes the link hold every byte in both directions (a connection that
// stopped answering without being closed). Undo with Remove("hold-up") and
// Remove("hold-down"), or Release.
func (p *Proxy) Hold() {
	p.add("hold-up", "timeout", "upstream", toxiclient.Attributes{"timeout": 0})
	p.add("hold-down", "timeout", "downstream", toxiclient.Attributes{"timeout": 0})
}

// Release undoes Hold.
func (p *Proxy) Release() { p.Remove("hold-up"); p.Remove("hold-down") }

// DropReplies lets requests through and closes each connection as its reply
// arrives: the server ran the command, the client never hears it. Undo
// with Remove("drop").
func (p *Proxy) DropReplies() {
	p.add("drop", "limit_data", "downstream", toxiclient.Attributes{"bytes": 1})
}

// Latency adds latency with jitter to replies. Undo with Remove("latency").
func (p *Proxy) Latency(ms, jitterMS int) {
	p.add("latency", "latency", "downstream", toxiclient.Attributes{"latency": ms, "jitter": jitterMS})
}

// SetUpstream points the proxy at another server; open connections are
// closed.
func (p *Proxy) SetUpstream(addr string) {
	p.t.Helper()
	p.p.Upstream = addr
	if err := p.p.Save(); err != nil {
		p.t.Fatalf("faultproxy: switching the proxy: %v", err)
	}
}

// IgnoreLeaks is the goleak option for packages whose tests use a
// Proxy. toxiproxy v2.12.0 can leave a link's stages blocked when the
// client side of a connection goes away while a chunk is between stages
// (NoopToxic.Pipe waits forever to hand it to a writer that has exited);
// those goroutines belong to the test's proxy, not to nandi, so leak checks
// skip them and still catch every goroutine of ours.
func IgnoreLeaks() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).read"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).write"),
	}
}
