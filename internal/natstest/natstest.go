package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Server is an embedded nats-server.
type Server struct {
	*server.Server
	t testing.TB
}

// Start starts a server with JetStream stored in a temporary directory and
// shuts it down when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("natstest: the embedded nats-server did not become ready in 10s")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return &Server{Server: s, t: t}
}

// Conn returns a connection closed when the test ends.
func (s *Server) Conn() *nats.Conn {
	s.t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		s.t.Fatalf("natstest: connect: %v", err)
	}
	s.t.Cleanup(nc.Close)
	return nc
}
