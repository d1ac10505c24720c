// Package pgtest starts a PostgreSQL server of a test's own, on an
// ephemeral loopback port in a temporary directory, so that a test can
// stop, restart and kill it: the machine's initdb and postgres (where
// pg_config --bindir says, or on PATH), run as the user "postgres" when
// the tests run as root (PostgreSQL refuses root). Without them it uses the
// address in NANDI_POSTGRES_URL (tests that must restart the server then
// fail and say why), and with neither it fails saying how to provide one:
// it never skips, but under -short.
package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvURL names the environment variable read when there are no server
// binaries: a database the tests may create tables in.
const EnvURL = "NANDI_POSTGRES_URL"

var (
	findOnce sync.Once
	bindir   string
	findErr  error
)

func find() (string, error) {
	findOnce.Do(func() {
		dirs := []string{}
		if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
			dirs = append(dirs, strings.TrimSpace(string(out)))
		}
		if p, err := exec.LookPath("initdb"); err == nil {
			dirs = append(dirs, filepath.Dir(p))
		}
		// Debian keeps the server's binaries off PATH, by version.
		debian, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		dirs = append(dirs, debian...)
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
				bindir = d
				return
			}
		}
		if os.Getenv(EnvURL) == "" {
			findErr = fmt.Errorf("pgtest: no PostgreSQL to test against: install its server (Debian: apt-get install -y postgresql; pg_config --bindir must name initdb), or set %s=postgres://... to a database the tests may use", EnvURL)
		}
	})
	return bindir, findErr
}

// Server is one PostgreSQL server.
type Server struct {
	t    testing.TB
	dir  string // the cluster's data directory and socket
	port int
	url  string
	cred *syscall.Credential // run as, when the tests run as root

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Start starts a server and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test needs a real PostgreSQL; make test runs it")
	}
	bin, err := find()
	if err != nil {
		t.Fatal(err)
	}
	if bin == "" {
		return &Server{t: t, url: os.Getenv(EnvURL)}
	}
	// Not t.TempDir: its parent is root's and closed to the user postgres
	// runs as.
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s := &Server{t: t, dir: dir, port: freePort(t)}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgtest: the tests run as root, which PostgreSQL refuses, and there is no user postgres to run it as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(s.dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(s.dir, "data")
	if out, err := s.command(filepath.Join(bin, "initdb"), "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8").CombinedOutput(); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	s.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
	s.Restart()
	t.Cleanup(s.Kill)
	return s
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = s.dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

// URL is the server's connection string (database postgres, user
// postgres, trust authentication).
func (s *Server) URL() string { return s.url }

// Restart starts the server again (after Kill or Stop) and waits until it
// answers.
func (s *Server) Restart() {
	s.t.Helper()
	if s.dir == "" {
		s.t.Fatalf("pgtest: the server at %s=%s cannot be restarted by the test", EnvURL, s.url)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := s.command(filepath.Join(bindir, "postgres"), "-D", filepath.Join(s.dir, "data"), "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+s.dir, "-c", "max_connections=200",
		"-c", "shared_buffers=64MB", "-c", "log_min_messages=fatal")
	log, _ := os.Create(filepath.Join(s.dir, "server.log"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("pgtest: starting postgres: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), 100*time.Millisecond)
		if err == nil {
			c.Close()
			// Accepting connections is not yet accepting queries while it
			// recovers: pg_isready says when it does.
			if exec.Command(filepath.Join(bindir, "pg_isready"), "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "postgres").Run() == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			s.t.Fatalf("pgtest: postgres did not answer in 30s:\n%s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill kills the server at once (SIGKILL): what it had not flushed is
// recovered from its WAL at the next start, as after a crash.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	// The postmaster and every process it started (each backend and
	// auxiliary process is a session of its own, so no process group
	// holds them all), as a killed container's: a backend still alive
	// holds the shared memory, and a restart on the data directory refuses
	// to start ("pre-existing shared memory block is still in use"; seen
	// under load when the backends were left to notice on their own).
	kids := children(s.cmd.Process.Pid)
	_ = s.cmd.Process.Kill()
	_, _ = s.cmd.Process.Wait()
	s.cmd = nil
	for _, pid := range kids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if !slices.ContainsFunc(kids, alive) {
			return
		}
	}
}

// children lists the processes whose parent is pid (Linux's /proc).
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procStat(p); ok && st.ppid == pid {
			out = append(out, p)
		}
	}
	return out
}

// alive reports whether pid runs (a zombie has let go of everything).
func alive(pid int) bool {
	st, ok := procStat(pid)
	return ok && st.state != "Z"
}

type stat struct {
	state string
	ppid  int
}

// procStat reads /proc/PID/stat: "pid (comm) state ppid ...".
func procStat(pid int) (stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	rest := string(b)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	if len(f) < 2 {
		return stat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	return stat{state: f[0], ppid: ppid}, true
}

// Stop stops the server cleanly (SIGTERM: smart shutdown is too patient
// for a test with open pools, so SIGINT, a fast shutdown).
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan struct{})
	go func() { _, _ = s.cmd.Process.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
}

// Exec runs SQL with psql against the server (for setup and checks that
// need no driver).
func (s *Server) Exec(ctx context.Context, sql string) (string, error) {
	out, err := exec.CommandContext(ctx, "psql", s.url, "-v", "ON_ERROR_STOP=1", "-Atc", sql).CombinedOutput()
	return string(out), err
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
