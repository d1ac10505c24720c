package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// The Docker fallback runs internal/containers, a program in a module of
// its own, with go run: testcontainers-go and Docker's client are its
// dependencies, never those of the packages whose tests use redistest, so
// that a module importing nandi's packages does not fetch them when go mod
// tidy loads those packages' tests.

// containersDir is internal/containers in this checkout.
func containersDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "containers")
}

// dockerMayRun reports whether a Docker engine may be reachable: DOCKER_HOST
// is set, or a socket is where Docker and its rootless mode put it.
func dockerMayRun() bool {
	if os.Getenv("DOCKER_HOST") != "" {
		return true
	}
	for _, p := range []string{"/var/run/docker.sock", filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "docker.sock"), filepath.Join(os.Getenv("HOME"), ".docker", "run", "docker.sock")} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// container is a Redis in a container, run by internal/containers.
type container struct {
	mu   sync.Mutex
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	addr string
}

func startContainer(args []string) (*container, error) {
	cmd := exec.Command("go", append([]string{"run", ".", "redis"}, args...)...)
	cmd.Dir = containersDir()
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("go run %s: %w", cmd.Dir, err)
	}
	c := &container{cmd: cmd, in: in, out: bufio.NewReader(out)}
	if c.addr, err = c.readAddr(); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

func (c *container) readAddr() (string, error) {
	line, err := c.out.ReadString('\n')
	if err != nil {
		return "", errors.New("internal/containers exited without an address (its error is above)")
	}
	return strings.TrimSpace(line), nil
}

// restart stops and starts the container and returns its new address.
func (c *container) restart() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := io.WriteString(c.in, "restart\n"); err != nil {
		return "", err
	}
	addr, err := c.readAddr()
	if err == nil {
		c.addr = addr
	}
	return addr, err
}

// stop ends the program, which terminates the container.
func (c *container) stop() {
	_ = c.in.Close()
	_ = c.cmd.Wait()
}
