package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// goRun is one `go run` line of an example's header or a page: the
// directory it runs from (relative to the repository's root), its target
// and the flags it gives.
type goRun struct {
	where, from, target string
	flags               []string
}

var (
	cdRE     = regexp.MustCompile(`cd ([\w./-]+) && go run (\S+)(.*)`)
	goRunRE  = regexp.MustCompile(`go run (\S+)(.*)`)
	fromRE   = regexp.MustCompile(`[Ff]rom (examples[\w/-]*)`)
	flagRE   = regexp.MustCompile(`(?:^|\s|\[)-([a-z][\w-]*)`)
	flagDefs = regexp.MustCompile(`\.(?:String|Int|Int64|Uint|Bool|Duration|Float64|Var|Func|TextVar|BoolFunc)\(\s*"([\w-]+)"|\.(?:String|Int|Int64|Uint|Bool|Duration|Float64)Var\([^,]+,\s*"([\w-]+)"`)
	cdLineRE = regexp.MustCompile(`^cd ([\w./-]+)\s*(?:#.*)?$`)
)

// parseGoRun reads a `go run` line; base is where a line without `cd`
// runs from ("" when nothing says).
func parseGoRun(where, line, base string) (goRun, bool) {
	line, _, _ = strings.Cut(line, "#")
	r := goRun{where: where, from: base}
	var rest string
	if m := cdRE.FindStringSubmatch(line); m != nil {
		r.from, r.target, rest = m[1], m[2], m[3]
	} else if m := goRunRE.FindStringSubmatch(line); m != nil {
		r.target, rest = m[1], m[2]
	} else {
		return r, false
	}
	for _, m := range flagRE.FindAllStringSubmatch(rest, -1) {
		r.flags = append(r.flags, m[1])
	}
	return r, true
}

// check says what is wrong with r: its directory, its target (a main
// package) and each flag (defined in that package).
func (r goRun) check(t *testing.T) {
	t.Helper()
	if r.from == "" {
		t.Errorf("%s: go run %s does not say where it runs from (cd DIR && go run, or From DIR in the header)", r.where, r.target)
		return
	}
	if strings.HasPrefix(r.target, "github.com/") || strings.Contains(r.target, "@") {
		return // a module path: not a directory of this repository
	}
	dir := filepath.Join(root, r.from, r.target)
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	var src strings.Builder
	main := false
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, _ := os.ReadFile(f)
		src.Write(b)
		main = main || regexp.MustCompile(`(?m)^package main$`).Match(b)
	}
	if !main {
		t.Errorf("%s: go run %s from %s: %s is not a main package", r.where, r.target, r.from, filepath.Join(r.from, r.target))
		return
	}
	defined := map[string]bool{}
	for _, m := range flagDefs.FindAllStringSubmatch(src.String(), -1) {
		defined[m[1]+m[2]] = true
	}
	for _, f := range r.flags {
		if !defined[f] {
			t.Errorf("%s: go run %s from %s -%s: the program has no flag -%s", r.where, r.target, r.from, f, f)
		}
	}
}

// Every `go run` line of an example's header runs from where it says, a
// main package, with flags it has.
func TestExampleHeadersRunFromWhereTheySay(t *testing.T) {
	mains, _ := filepath.Glob(filepath.Join(root, "examples", "*", "main.go"))
	n := 0
	for _, f := range mains {
		rel, _ := filepath.Rel(root, f)
		b, _ := os.ReadFile(f)
		header, _, _ := strings.Cut(string(b), "\npackage ")
		base := ""
		if m := fromRE.FindStringSubmatch(header); m != nil {
			base = m[1]
		}
		for _, l := range strings.Split(header, "\n") {
			if r, ok := parseGoRun(rel, l, base); ok {
				n++
				r.check(t)
			}
		}
	}
	if n < 6 {
		t.Fatalf("%d go run lines in the examples' headers; want one per example at least", n)
	}
}

// Every `go run` line of the README and the guide's shell blocks runs
// from where it says (cd DIR && go run, or from the repository's root).
func TestPageCommandsRunFromWhereTheySay(t *testing.T) {
	n := 0
	for _, pg := range pages(t) {
		_, blocks := parse(read(t, pg))
		for _, b := range blocks {
			if b.lang != "sh" && b.lang != "" {
				continue
			}
			base := "."
			for _, l := range strings.Split(b.text, "\n") {
				if m := cdLineRE.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
					base = m[1] // the block's later lines run from there
					continue
				}
				if r, ok := parseGoRun(pg, l, base); ok {
					n++
					r.check(t)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no go run line found in the pages")
	}
}

var (
	nandiOnce sync.Once
	nandiBin  string
	nandiErr  error
)

// nandiHelp returns `nandi help CMD`'s output, or false when the command
// does not exist; the binary is built once.
func nandiHelp(t *testing.T, cmd string) (string, bool) {
	t.Helper()
	nandiOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nandi-docs")
		if err != nil {
			nandiErr = err
			return
		}
		nandiBin = filepath.Join(dir, "nandi")
		out, err := exec.Command("go", "build", "-o", nandiBin, "../../cmd/nandi").CombinedOutput()
		if err != nil {
			nandiErr = err
			t.Logf("%s", out)
		}
	})
	if nandiErr != nil {
		t.Fatalf("building cmd/nandi: %v", nandiErr)
	}
	out, err := exec.Command(nandiBin, append([]string{"help"}, strings.Fields(cmd)...)...).CombinedOutput()
	return string(out), err == nil
}

var nandiLineRE = regexp.MustCompile(`(?:^|\$ |&& )nandi ((?:[a-z]+ ?){1,2})(.*)`)

// Every nandi command line of the README and the guide's blocks names a
// command that exists, with flags it has.
func TestNandiCommandsInPagesExist(t *testing.T) {
	n := 0
	for _, pg := range pages(t) {
		_, blocks := parse(read(t, pg))
		for _, b := range blocks {
			for _, l := range strings.Split(b.text, "\n") {
				m := nandiLineRE.FindStringSubmatch(strings.TrimSpace(l))
				if m == nil {
					continue
				}
				words := strings.Fields(m[1])
				rest := m[2]
				// "dead list", "checkpoint reset": two words; else one.
				cmd := words[0]
				if len(words) > 1 && (cmd == "dead" || cmd == "checkpoint") {
					cmd += " " + words[1]
				} else if len(words) > 1 {
					rest = strings.Join(words[1:], " ") + " " + rest
				}
				help, ok := nandiHelp(t, cmd)
				n++
				if !ok {
					t.Errorf("%s: nandi %s: no such command (%s)", pg, cmd, strings.TrimSpace(help))
					continue
				}
				rest, _, _ = strings.Cut(rest, "#")
				for _, f := range flagRE.FindAllStringSubmatch(rest, -1) {
					if !regexp.MustCompile(`(?m)^\s+-` + regexp.QuoteMeta(f[1]) + `\b`).MatchString(help) {
						t.Errorf("%s: nandi %s -%s: the command has no flag -%s", pg, cmd, f[1], f[1])
					}
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("%d nandi command lines found in the pages; want the guide's samples", n)
	}
}

// Every test and benchmark a page names (where a figure or a claim comes
// from) exists: a func of that name in some _test.go of the repository.
func TestNamedTestsExist(t *testing.T) {
	funcs := map[string]bool{}
	def := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz|Example)\w*)\(`)
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") && path != root {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") {
			b, _ := os.ReadFile(path)
			for _, m := range def.FindAllStringSubmatch(string(b), -1) {
				funcs[m[1]] = true
			}
		}
		return nil
	})
	named := regexp.MustCompile(`\b((?:Test|Benchmark)[A-Z]\w+)`)
	n := 0
	for _, pg := range pages(t) {
		text := read(t, pg)
		for _, loc := range named.FindAllStringSubmatchIndex(text, -1) {
			n++
			name := text[loc[2]:loc[3]]
			if funcs[name] || strings.Contains(text[max(0, loc[0]-40):loc[0]], "Watermill") {
				continue // ours, or Watermill's own suite's (tests.TestPubSub, TestReconnect)
			}
			prefix := false // a -run pattern: '^TestSink' names every TestSink...
			for f := range funcs {
				prefix = prefix || strings.HasPrefix(f, name)
			}
			if !prefix {
				t.Errorf("%s names %s: no test or benchmark of that name in the repository", pg, name)
			}
		}
	}
	if n < 20 {
		t.Fatalf("%d tests named in the pages; want the guide's", n)
	}
}
