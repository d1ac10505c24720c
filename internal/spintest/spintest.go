package spintest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Run is one check of a model.
type Run struct {
	// Defines are passed to spin -a as -D flags: "EVENTS=2", "BUG_OPEN".
	Defines []string
	// Compile are extra flags for gcc: "-DCOLLAPSE", "-DHC4", "-DBITSTATE".
	Compile []string
	// Pan are extra flags for the verifier: "-w30".
	Pan []string
	// MemoryMB caps the verifier's memory (-DMEMLIM); 0: 8000.
	MemoryMB int
	// Depth bounds the search (pan -m): with -DBFS, every execution of up
	// to Depth steps is checked (bounded model checking); 0: 100000, which
	// no model here reaches.
	Depth int
}

// Result is what the verifier reported.
type Result struct {
	Errors    int
	States    float64 // states stored
	Depth     int     // the depth reached
	Violation string  // the first assertion violated, if any
	At        int     // the depth it was violated at
	Complete  bool    // the search was not cut short by memory
	DepthCut  bool    // the search reached its depth bound (Run.Depth)
	MemoryMB  float64
	Elapsed   time.Duration
	Output    string
	Trail     string // for a violation: spin's replay of the counterexample
}

func (r Result) String() string {
	s := fmt.Sprintf("errors %d, %.0f states, depth %d, %.1f MB, %s", r.Errors, r.States, r.Depth,
		r.MemoryMB, r.Elapsed.Round(100*time.Millisecond))
	if r.Violation != "" {
		s += fmt.Sprintf("; violated at depth %d: %s", r.At, r.Violation)
	}
	if !r.Complete {
		s += "; out of memory: search incomplete"
	}
	if r.DepthCut {
		s += "; cut at the depth bound"
	}
	return s
}

var (
	reErrors    = regexp.MustCompile(`errors: (\d+)`)
	reStates    = regexp.MustCompile(`([0-9.e+]+) states, stored`)
	reDepth     = regexp.MustCompile(`depth reached (\d+)`)
	reViolation = regexp.MustCompile(`pan:\d+: (assertion violated .*) \(at depth (\d+)\)`)
	reMemory    = regexp.MustCompile(`([0-9.]+)\s+total actual memory usage`)
)

// Tools fails the test unless spin and gcc are on PATH.
func Tools(t testing.TB) (spin, gcc string) {
	t.Helper()
	var err error
	if spin, err = exec.LookPath("spin"); err != nil {
		t.Fatal("spin is not installed: the protocol's models need it (apt-get install -y spin, as .ci/run does)")
	}
	if gcc, err = exec.LookPath("gcc"); err != nil {
		t.Fatal("gcc is not installed: spin's verifiers are C (apt-get install -y gcc, as .ci/run does)")
	}
	return spin, gcc
}

// Check verifies the model at path (relative to the test's directory)
// under run, and returns what the verifier reported. It fails the test
// only when the checker cannot run.
func Check(t testing.TB, path string, run Run) Result {
	t.Helper()
	spin, gcc := Tools(t)
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	model := filepath.Join(dir, "model.pml")
	if err := os.WriteFile(model, src, 0o644); err != nil {
		t.Fatal(err)
	}
	var defines []string
	for _, d := range run.Defines {
		defines = append(defines, "-D"+d)
	}
	sh := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	sh(spin, append(append([]string{}, defines...), "-a", "model.pml")...)
	mem := run.MemoryMB
	if mem == 0 {
		mem = 8000
	}
	// -O1: pan.c compiles in 2 s instead of 5 at -O2, and searches about
	// as fast (the lease's 10 million states: 18 s at -O1, 16 s at -O2);
	// most runs here find a seeded bug in under a second. A run's Compile
	// may say -O2 (gcc takes the last).
	sh(gcc, append([]string{"-w", "-O1", fmt.Sprintf("-DMEMLIM=%d", mem), "-DVECTORSZ=4096", "-o", "pan", "pan.c"},
		run.Compile...)...)

	start := time.Now()
	depth := run.Depth
	if depth == 0 {
		depth = 100000
	}
	cmd := exec.Command("./pan", append([]string{fmt.Sprintf("-m%d", depth)}, run.Pan...)...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run() // pan exits non-zero on some errors: the report says which
	res := Result{Elapsed: time.Since(start), Output: out.String()}
	text := res.Output
	m := reErrors.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("the verifier reported no result (%v):\n%s", err, text)
	}
	res.Errors, _ = strconv.Atoi(m[1])
	if m := reStates.FindStringSubmatch(text); m != nil {
		res.States, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := reDepth.FindStringSubmatch(text); m != nil {
		res.Depth, _ = strconv.Atoi(m[1])
	}
	if m := reMemory.FindStringSubmatch(text); m != nil {
		res.MemoryMB, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := reViolation.FindStringSubmatch(text); m != nil {
		res.Violation = m[1]
		res.At, _ = strconv.Atoi(m[2])
	}
	res.Complete = !strings.Contains(text, "reached -DMEMLIM bound")
	res.DepthCut = strings.Contains(text, "max search depth too small")
	if res.Errors > 0 {
		if _, err := os.Stat(filepath.Join(dir, "model.pml.trail")); err == nil {
			cmd := exec.Command(spin, append(append([]string{}, defines...), "-t", "-p", "-g", "model.pml")...)
			cmd.Dir = dir
			trail, _ := cmd.CombinedOutput()
			res.Trail = string(trail)
		}
	}
	return res
}

// Tail is the last n lines of s: where a counterexample ends.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Mode is how hard the models are checked, from NANDI_MODEL: "" for make
// test (the exhaustive small bounds, a minute or so), "full" for make
// model (larger exhaustive bounds, with hash compaction), "chaos" for
// make chaos (the largest, with bitstate search).
func Mode() string { return os.Getenv("NANDI_MODEL") }

// Violates reports whether r's violation is of the assertion want (spaces
// and parentheses aside: spin prints an assertion without them).
func (r Result) Violates(want string) bool {
	norm := strings.NewReplacer(" ", "", "(", "", ")", "", "\t", "").Replace
	return r.Errors > 0 && strings.Contains(norm(r.Violation), norm(want))
}

// Holds checks the model at path under each run, as a subtest named by
// its key, and fails the subtest unless the model holds: no error, and a
// search that finished (within its depth bound when the run has one). A
// violation is reported with the end of spin's replay of it.
func Holds(t *testing.T, path string, runs map[string]Run) {
	t.Helper()
	for name, run := range runs {
		t.Run(name, func(t *testing.T) {
			res := Check(t, path, run)
			t.Logf("%s: %s", name, res)
			if res.Errors != 0 {
				t.Fatalf("the model is violated: %s\n%s", res.Violation, Tail(res.Trail, 80))
			}
			if !res.Complete || (res.DepthCut && run.Depth == 0) {
				t.Fatalf("the search did not finish (memory or depth):\n%s", res.Output)
			}
		})
	}
}
