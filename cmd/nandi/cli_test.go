package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nandi-go/nandi/internal/redistest"
)

// Help, asked for in any of the usual ways, goes to stdout and exits 0.
func TestHelpExitsZeroOnStdout(t *testing.T) {
	for _, args := range [][]string{
		{"help"}, {"-h"}, {"--help"},
		{"help", "plan"}, {"plan", "-h"}, {"plan", "-help"}, {"status", "--help"}, {"watch", "-h"},
		{"pause", "-h"}, {"resume", "-h"}, {"web", "-h"}, {"version", "-h"},
		{"help", "dead"}, {"dead", "-h"}, {"help", "dead", "list"}, {"dead", "list", "-h"}, {"dead", "replay", "-h"}, {"dead", "show", "-h"}, {"groups", "-h"},
		{"help", "checkpoint"}, {"checkpoint", "reset", "-h"}, {"help", "help"},
	} {
		code, out, errOut := nandi(t, context.Background(), args...)
		if code != 0 || errOut != "" || !strings.Contains(out, "usage:") {
			t.Errorf("nandi %s: exit %d, stdout %q, stderr %q; want 0, the usage on stdout, nothing on stderr", strings.Join(args, " "), code, out, errOut)
		}
	}
	_, out, _ := nandi(t, context.Background(), "help", "plan")
	for _, want := range []string{"usage: nandi plan", "-interval", "-workers", "-shards"} {
		if !strings.Contains(out, want) {
			t.Errorf("nandi help plan does not mention %q:\n%s", want, out)
		}
	}
	_, out, _ = nandi(t, context.Background(), "help")
	for _, c := range commands {
		if !strings.Contains(out, "nandi "+c.name) {
			t.Errorf("nandi help does not list %q:\n%s", c.name, out)
		}
	}
}

// A usage error (an unknown flag or command, an argument left over, a
// bad value, a required flag missing, a host where a URL goes) says what
// is wrong on stderr, nothing on stdout, and exits 2.
func TestUsageErrorsExitTwoOnStderr(t *testing.T) {
	t.Setenv(envRedisURL, "")
	t.Setenv("REDIS_URL", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "usage"},
		{[]string{"stauts"}, `unknown command "stauts"`},
		{[]string{"plan", "extra"}, `unexpected argument "extra"`},
		{[]string{"plan", "-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"plan", "-workers", "many"}, `invalid value "many"`},
		{[]string{"plan", "-workers", "0"}, "-workers must be at least 1"},
		{[]string{"plan", "-gap", "0.5"}, "Gap 0.5"},
		{[]string{"plan", "-interval", "1ms"}, "Interval"},
		{[]string{"watch", "-json", "-group", "g", "-redis", "redis://127.0.0.1:1"}, "flag provided but not defined: -json"},
		{[]string{"status", "-group", "g"}, "-redis is required (or set $NANDI_REDIS_URL)"},
		{[]string{"status", "-redis", "redis://127.0.0.1:1"}, "-group is required"},
		{[]string{"status", "-redis", "localhost:6379", "-group", "g"}, "did you mean redis://localhost:6379?"},
		{[]string{"status", "-redis", "http://localhost:6379", "-group", "g"}, `unknown scheme "http"`},
		{[]string{"status", "-group", "g", "-redis", "redis://127.0.0.1:1", "extra"}, `unexpected argument "extra"`},
		{[]string{"pause", "-redis", "redis://127.0.0.1:1"}, "-group is required"},
		{[]string{"dead"}, "a subcommand is required"},
		{[]string{"dead", "bury"}, `unknown subcommand "bury"`},
		{[]string{"dead", "replay", "-group", "g", "-redis", "redis://127.0.0.1:1"}, "give either -id or -all"},
		{[]string{"checkpoint", "reset", "-group", "g"}, "-group and -to are required"},
		{[]string{"web", "-redis", "redis://127.0.0.1:1", "-tls-cert", "c.pem"}, "-tls-key"},
		{[]string{"version", "extra"}, `unexpected argument "extra"`},
		{[]string{"help", "nosuch"}, `unknown command "nosuch"`},
	} {
		code, out, errOut := nandi(t, context.Background(), c.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("nandi %s: exit %d, stdout %q, stderr %q; want 2, nothing on stdout, %q on stderr", strings.Join(c.args, " "), code, out, errOut, c.want)
		}
	}
}

// -redis defaults to $NANDI_REDIS_URL, else $REDIS_URL; a flag wins.
func TestRedisURLFromTheEnvironment(t *testing.T) {
	s := redistest.Start(t)
	runGroup(t, s.Client(), "envgroup")
	url := "redis://" + s.Addr()
	for _, c := range []struct{ nandiURL, redisURL string }{
		{url, ""}, {"", url}, {url, "redis://127.0.0.1:1"},
	} {
		t.Setenv(envRedisURL, c.nandiURL)
		t.Setenv("REDIS_URL", c.redisURL)
		if code, out, errOut := nandi(t, context.Background(), "status", "-group", "envgroup"); code != 0 || !strings.Contains(out, "envgroup") {
			t.Errorf("%s=%q REDIS_URL=%q: exit %d\n%s%s", envRedisURL, c.nandiURL, c.redisURL, code, out, errOut)
		}
	}
	t.Setenv(envRedisURL, "redis://127.0.0.1:1")
	if code, out, errOut := nandi(t, context.Background(), "status", "-group", "envgroup", "-redis", url); code != 0 {
		t.Errorf("-redis given with %s set elsewhere: exit %d\n%s%s", envRedisURL, code, out, errOut)
	}
	_, out, _ := nandi(t, context.Background(), "help", "status")
	if !strings.Contains(out, "default from $"+envRedisURL) {
		t.Errorf("help status does not say where -redis's default came from:\n%s", out)
	}
}

// A group nothing is known of is said so once, plainly, on stderr (exit
// 1).
func TestStatusOfAnUnknownGroup(t *testing.T) {
	s := redistest.Start(t)
	code, out, errOut := nandi(t, context.Background(), "status", "-redis", "redis://"+s.Addr(), "-group", "nosuch")
	if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, `no group "nosuch"`) {
		t.Errorf("status of an unknown group: exit %d, stdout %q, stderr %q; want 1 and one line that says so", code, out, errOut)
	}
}

// An unreachable Redis is one line on stderr (exit 1), without
// go-redis's pool log lines, within a bounded time: refused at once, a
// server that never answers after reachTimeout.
func TestUnreachableRedisIsOneLine(t *testing.T) {
	bin := binary(t)
	start := time.Now()
	cmd := exec.Command(bin, "status", "-redis", "redis://127.0.0.1:1", "-group", "g")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("status against a closed port: %v; want exit 1", err)
	}
	if out.Len() != 0 || strings.Count(errOut.String(), "\n") != 1 || !strings.HasPrefix(errOut.String(), "nandi status: cannot reach Redis at 127.0.0.1:1:") {
		t.Errorf("stdout %q, stderr %q; want one line, \"nandi status: cannot reach Redis at 127.0.0.1:1: ...\"", out.String(), errOut.String())
	}
	t.Logf("refused: reported after %v", time.Since(start))

	// A server that accepts and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	defer func() { ln.Close(); conns.Wait() }()
	conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	})
	prev := reachTimeout
	reachTimeout = 300 * time.Millisecond
	defer func() { reachTimeout = prev }()
	code, o, e := nandi(t, context.Background(), "status", "-redis", "redis://"+ln.Addr().String(), "-group", "g")
	if code != 1 || o != "" || strings.Count(e, "\n") != 1 || !strings.Contains(e, "no answer within 300ms") {
		t.Errorf("a silent server: exit %d, stdout %q, stderr %q; want 1 and one line: no answer within 300ms", code, o, e)
	}
}

// SIGTERM ends watch and web as ^C does: exit 0 (a pod being stopped).
func TestSIGTERMEndsLikeInterrupt(t *testing.T) {
	bin := binary(t)
	s := redistest.Start(t)
	runGroup(t, s.Client(), "term")
	for _, args := range [][]string{
		{"watch", "-redis", "redis://" + s.Addr(), "-group", "term"},
		{"web", "-redis", "redis://" + s.Addr(), "-addr", "127.0.0.1:0"},
	} {
		cmd := exec.Command(bin, args...)
		var out, errOut lockedBuffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Until it is running: watch's header, web's address.
		deadline := time.Now().Add(30 * time.Second)
		for out.Len() == 0 && errOut.Len() == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("nandi %s after SIGTERM: %v; want exit 0\n%s%s", args[0], err, out.String(), errOut.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("nandi %s did not end on SIGTERM", args[0])
		}
	}
}

func TestVersion(t *testing.T) {
	code, out, errOut := nandi(t, context.Background(), "version")
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "nandi ") || !strings.Contains(out, "go1.") {
		t.Errorf("version: exit %d, %q, %q; want 0 and \"nandi VERSION ... goX\"", code, out, errOut)
	}
}

// lockedBuffer is a bytes.Buffer a process writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// binary builds nandi once for the tests that run it as a process.
func binary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nandi-bin")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "nandi")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = errors.New(string(out))
		}
	})
	if binErr != nil {
		t.Fatalf("building nandi: %v", binErr)
	}
	return binPath
}

// assertSnakeCase fails t unless every key of the JSON document out is
// snake_case (user data excepted: the keys of a "headers" object are the
// task's own).
func assertSnakeCase(t *testing.T, what, out string) {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", what, err, out)
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if !snake.MatchString(k) {
					t.Errorf("%s: key %q at %s is not snake_case", what, k, path)
				}
				if k != "headers" && k != "positions" { // data: the task's headers, positions by "index/shard"
					walk(path+"."+k, e)
				}
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		}
	}
	walk("$", v)
}

// A synopsis that shows a flag with a value in lower case shows its
// default (upper case is a placeholder: -redis URL): nandi plan's once
// showed -rtt 2ms -jitter 1ms -workers 200 while the defaults were 1ms, 0
// and 10.
func TestSynopsesShowTheDefaults(t *testing.T) {
	pair := regexp.MustCompile(`\[-([a-z-]+) ([^\]\s|]+)\]`)
	flagLine := regexp.MustCompile(`^  -([a-z-]+)`)
	def := regexp.MustCompile(`\(default "?([^")]+)"?\)`)
	n := 0
	for _, c := range commands {
		if c.run == nil && !strings.Contains(c.name, " ") {
			continue
		}
		code, help, _ := nandi(t, context.Background(), append(strings.Fields(c.name), "-h")...)
		if code != 0 {
			continue
		}
		defaults := map[string]string{} // a flag without "(default X)" has its zero value
		cur := ""
		for _, l := range strings.Split(help, "\n") {
			if m := flagLine.FindStringSubmatch(l); m != nil {
				cur = m[1]
				defaults[cur] = "0"
			} else if m := def.FindStringSubmatch(l); m != nil && cur != "" {
				defaults[cur] = m[1]
			}
		}
		for _, m := range pair.FindAllStringSubmatch(c.synopsis, -1) {
			if regexp.MustCompile(`^[A-Z]`).MatchString(m[2]) {
				continue // a placeholder: -redis URL, -shards S
			}
			n++
			if d, ok := defaults[m[1]]; !ok || d != m[2] {
				t.Errorf("nandi %s's synopsis shows -%s %s; its default is %q", c.name, m[1], m[2], d)
			}
		}
	}
	if n < 5 {
		t.Fatalf("%d synopsis defaults checked; want nandi plan's at least", n)
	}
}

// dead show takes exactly one argument after its flags.
func TestDeadShowWantsOneID(t *testing.T) {
	for _, args := range [][]string{{"-group", "g"}, {"-group", "g", "1-0", "2-0"}} {
		code, _, errOut := nandi(t, context.Background(), append([]string{"dead", "show", "-redis", "redis://127.0.0.1:1"}, args...)...)
		if code != exitUsage || !strings.Contains(errOut, "usage: nandi dead show") {
			t.Errorf("dead show %v: exit %d, %q; want a usage error", args, code, errOut)
		}
	}
}

// Small things a newcomer meets first: help's own -h is help, flag errors
// and bad IDs are said as the command's, in its words (not Redis's), and
// counts of one are singular.
func TestTheFirstMinutes(t *testing.T) {
	ctx := context.Background()
	if code, out, _ := nandi(t, ctx, "help", "-h"); code != exitOK || !strings.Contains(out, "usage:") {
		t.Errorf("nandi help -h: exit %d\n%s", code, out)
	}
	if code, _, errOut := nandi(t, ctx, "status", "-bogus"); code != exitUsage || !strings.HasPrefix(errOut, "nandi status: flag provided but not defined: -bogus") {
		t.Errorf("an unknown flag: exit %d, %q; want it said as nandi status's", code, errOut)
	}
	for _, args := range [][]string{
		{"dead", "replay", "-redis", "redis://127.0.0.1:1", "-group", "g", "-id", "garbage"},
		{"dead", "show", "-redis", "redis://127.0.0.1:1", "-group", "g", "garbage"},
		{"dead", "list", "-redis", "redis://127.0.0.1:1", "-group", "g", "-from", "yesterday"},
	} {
		if code, _, errOut := nandi(t, ctx, args...); code != exitUsage || !strings.Contains(errOut, "is not a stream entry ID") || strings.Contains(errOut, "ERR") {
			t.Errorf("nandi %s: exit %d, %q; want a usage error naming the ID", strings.Join(args, " "), code, errOut)
		}
	}
	if _, out, _ := nandi(t, ctx, "plan", "-workers", "1"); !strings.Contains(out, "1 worker\n") {
		t.Errorf("plan -workers 1 says:\n%s", out)
	}
}
