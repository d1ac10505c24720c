package natstest

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Server is an embedded nats-server.
type Server struct {
	*server.Server
	t    testing.TB
	opts server.Options
	mu   sync.RWMutex // held to write Server (Restart), to read it in Conn
}

// Start starts a server with JetStream stored in a temporary directory and
// shuts it down when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, opts: server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *Server) start() {
	opts := s.opts
	srv, err := server.NewServer(&opts)
	if err != nil {
		s.t.Fatalf("natstest: %v", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		s.t.Fatal("natstest: the embedded nats-server did not become ready in 10s")
	}
	s.Server = srv
	s.opts.Port = srv.Addr().(*net.TCPAddr).Port
}

func (s *Server) stop() {
	s.Shutdown()
	s.WaitForShutdown()
}

// Restart shuts the server down and starts it again on the same port and
// store: streams and their messages survive, and clients reconnect (by
// nats.go's reconnect rules). Conn may be called meanwhile; the embedded
// server's own methods may not.
func (s *Server) Restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop()
	s.start()
}

// Conn returns a connection closed when the test ends, which reconnects
// for as long as it takes (a Restart).
func (s *Server) Conn() *nats.Conn {
	s.t.Helper()
	s.mu.RLock()
	url := s.ClientURL()
	s.mu.RUnlock()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		s.t.Fatalf("natstest: connect: %v", err)
	}
	s.t.Cleanup(nc.Close)
	return nc
}
