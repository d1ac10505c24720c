package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvAddr names the environment variable read when there is neither a
// redis-server binary nor a Docker engine.
const EnvAddr = "NANDI_REDIS_ADDR"

type source int

const (
	fromBinary source = iota + 1
	fromDocker
	fromEnv
)

var (
	findOnce sync.Once
	found    source
	binary   string
	cliPath  string
	findErr  error
)

func find() (source, error) {
	findOnce.Do(func() {
		if p, err := exec.LookPath("redis-server"); err == nil {
			binary, found = p, fromBinary
			cliPath, _ = exec.LookPath("redis-cli")
			return
		}
		if dockerHealthy() {
			found = fromDocker
			return
		}
		if os.Getenv(EnvAddr) != "" {
			found = fromEnv
			return
		}
		findErr = fmt.Errorf("redistest: no Redis to test against: install redis-server (Debian: apt-get install -y redis-server), " +
			"or start a Docker engine for testcontainers-go, or set " + EnvAddr + "=host:port to a server the tests may flush")
	})
	return found, findErr
}

// dockerHealthy reports whether a Docker engine answers, asked through
// internal/containers (testcontainers-go, in a module of its own: see
// container.go) when a socket or DOCKER_HOST says there may be one.
func dockerHealthy() bool {
	if !dockerMayRun() {
		return false
	}
	cmd := exec.Command("go", "run", ".", "health")
	cmd.Dir = containersDir()
	return cmd.Run() == nil
}

// Server is one Redis server.
type Server struct {
	t    testing.TB
	src  source
	addr string
	port int
	dir  string
	args []string
	conf []string // before every other argument: a config file, "--sentinel"

	mu   sync.Mutex
	cmd  *exec.Cmd
	exit chan struct{}
	ctr  *container
}

// Start starts a server (see the package doc for where it comes from) and
// stops it when the test ends. args are extra redis-server arguments, as
// "--appendonly", "yes". Under -short (make test-unit) the test is skipped,
// saying so: make test never passes -short.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	return start(t, nil, args)
}

func start(t testing.TB, conf, args []string) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test needs a real redis-server; make test runs it")
	}
	src, err := find()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, src: src, args: args, conf: conf}
	switch src {
	case fromBinary:
		s.dir = t.TempDir()
		// A port free when chosen can be taken before the server binds it
		// (another test's client or server; for a cluster node, its bus
		// port, port+10000, too): choose another and start again.
		var err error
		for range 5 {
			s.port = freePort(t, slices.Contains(args, "--cluster-enabled"))
			s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
			if err = s.tryStart(); err == nil || !strings.Contains(s.Log(), "Address already in use") {
				break
			}
		}
		if err != nil {
			t.Fatalf("redistest: redis-server on port %d did not answer: %v; log:\n%s", s.port, err, s.Log())
		}
		t.Cleanup(s.Kill)
	case fromDocker:
		ctr, err := startContainer(args)
		if err != nil {
			t.Fatalf("redistest: starting a Redis container: %v", err)
		}
		t.Cleanup(ctr.stop)
		s.ctr = ctr
		s.addr = ctr.addr
	case fromEnv:
		s.addr = os.Getenv(EnvAddr)
		c := redis.NewClient(&redis.Options{Addr: s.addr})
		defer c.Close()
		if err := c.FlushAll(context.Background()).Err(); err != nil {
			t.Fatalf("redistest: %s=%s: %v", EnvAddr, s.addr, err)
		}
	}
	return s
}

// Addr is host:port.
func (s *Server) Addr() string { return s.addr }

// Port is the server's port.
func (s *Server) Port() int { return s.port }

// Client returns a new client for the server, closed when the test ends.
func (s *Server) Client(opts ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: s.addr}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (s *Server) needProcess(what string) {
	s.t.Helper()
	if s.src != fromBinary {
		s.t.Fatalf("redistest: this test must %s the server, which needs a redis-server binary on PATH (Debian: apt-get install -y redis-server); the server here is not one the test can control", what)
	}
}

func (s *Server) startProcess() {
	s.t.Helper()
	var lastErr error
	for range 3 {
		if lastErr = s.tryStart(); lastErr == nil {
			return
		}
	}
	s.t.Fatalf("redistest: redis-server on port %d did not answer: %v; log:\n%s", s.port, lastErr, s.Log())
}

// tryStart starts the server process once on s.port and waits until it
// answers; on failure it is killed and the error returned.
func (s *Server) tryStart() error {
	s.t.Helper()
	args := append(append([]string{}, s.conf...),
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--logfile", filepath.Join(s.dir, "redis.log"),
		// A replica that attaches syncs at once, not after Redis 7's 5s
		// wait for more replicas to share a diskless transfer.
		"--repl-diskless-sync-delay", "0")
	args = append(args, s.args...)
	cmd := exec.Command(binary, args...)
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redistest: starting %s: %v", binary, err)
	}
	exit := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exit) }()
	s.mu.Lock()
	s.cmd, s.exit = cmd, exit
	s.mu.Unlock()
	err := s.waitReady(exit)
	if err != nil {
		s.Kill()
	}
	return err
}

func (s *Server) waitReady(exit chan struct{}) error {
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return nil
		}
		select {
		case <-exit:
			return fmt.Errorf("redis-server exited")
		default:
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Log returns the server's log file (binary servers only).
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	return string(b)
}

// Kill kills the server with SIGKILL and waits for it to exit.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, exit := s.cmd, s.exit
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exit
}

// Restart kills the server and starts it again on the same port. Without
// persistence it comes back empty, with a new run_id.
func (s *Server) Restart() {
	s.t.Helper()
	if s.src == fromDocker {
		addr, err := s.ctr.restart()
		if err != nil {
			s.t.Fatalf("redistest: restarting the container: %v", err)
		}
		s.addr = addr
		return
	}
	s.needProcess("restart")
	s.Kill()
	s.startProcess()
}

// RestartSaved stops the server as a clean shutdown does (SHUTDOWN SAVE:
// it writes its data to its directory) and starts it again on the same
// port with that data, a new run_id: what docker restart does to a Redis
// with its default persistence.
func (s *Server) RestartSaved() {
	s.t.Helper()
	s.needProcess("restart")
	s.mu.Lock()
	cmd, exit := s.cmd, s.exit
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		_, _ = s.Do("SHUTDOWN", "SAVE")
		select {
		case <-exit:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exit
		}
	}
	s.startProcess()
}

// Do runs one command on the server with a fresh connection.
func (s *Server) Do(args ...any) (any, error) {
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer c.Close()
	return c.Do(context.Background(), args...).Result()
}

// StartReplica starts a replica of master and waits until it is in sync.
func StartReplica(t testing.TB, master *Server, args ...string) *Server {
	t.Helper()
	master.needProcess("replicate")
	host, port, _ := net.SplitHostPort(master.addr)
	r := Start(t, append([]string{"--replicaof", host, port}, args...)...)
	WaitFor(t, 10*time.Second, "the replica to sync", func() bool {
		info, err := r.Do("INFO", "replication")
		return err == nil && strings.Contains(fmt.Sprint(info), "master_link_status:up")
	})
	return r
}

// Promote makes a replica a master (REPLICAOF NO ONE).
func (s *Server) Promote() {
	s.t.Helper()
	if _, err := s.Do("REPLICAOF", "NO", "ONE"); err != nil {
		s.t.Fatalf("redistest: promoting: %v", err)
	}
}

// Info returns one field of INFO.
func (s *Server) Info(field string) string { return s.InfoSection("default", field) }

// InfoSection returns one field of one section of INFO.
func (s *Server) InfoSection(section, field string) string {
	v, err := s.Do("INFO", section)
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(strings.NewReader(fmt.Sprint(v)))
	for sc.Scan() {
		if k, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":"); ok && k == field {
			return val
		}
	}
	return ""
}

// WaitFor polls cond until it holds, failing the test after timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// freePort returns a loopback port free now; with bus, one whose cluster
// bus port (port+10000) is free too.
func freePort(t testing.TB, bus bool) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("redistest: no free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !bus {
			l.Close()
			return port
		}
		if port+10000 <= 65535 {
			if b, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000))); err == nil {
				b.Close()
				l.Close()
				return port
			}
		}
		l.Close()
	}
	t.Fatal("redistest: no free port whose cluster bus port is free too")
	return 0
}

// alive reports whether the server's process runs (a server from Docker or
// the environment is taken to run).
func (s *Server) alive() bool {
	if s.src != fromBinary {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}
