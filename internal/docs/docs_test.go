package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const root = "../.."

// pages returns the README and every page of the guide, relative to root.
func pages(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no pages under docs/: %v", err)
	}
	out := []string{"README.md"}
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		out = append(out, rel)
	}
	return out
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// block is a fenced code block of a page.
type block struct {
	lang   string
	mark   string // the HTML comment just before it, if any
	text   string
	line   int // of its opening fence
	lines_ []string
}

// parse splits a page into its prose (code blocks blanked) and its
// blocks.
func parse(page string) (prose string, blocks []block) {
	lines := strings.Split(page, "\n")
	var p []string
	var cur *block
	lastComment := ""
	for i, l := range lines {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &block{lang: strings.TrimSpace(strings.TrimPrefix(l, "```")), mark: lastComment, line: i + 1}
			p = append(p, "")
		case cur != nil && strings.HasPrefix(l, "```"):
			cur.text = strings.Join(cur.lines_, "\n")
			blocks = append(blocks, *cur)
			cur = nil
			p = append(p, "")
			lastComment = ""
		case cur != nil:
			cur.lines_ = append(cur.lines_, l)
			p = append(p, "")
		default:
			p = append(p, l)
			if t := strings.TrimSpace(l); strings.HasPrefix(t, "<!--") {
				lastComment = t
			} else if t != "" {
				lastComment = ""
			}
		}
	}
	return strings.Join(p, "\n"), blocks
}

var (
	linkRE    = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	inlineRE  = regexp.MustCompile("`[^`]*`")
)

// slugs returns the anchors GitHub makes of a page's headings.
func slugs(page string) map[string]bool {
	prose, _ := parse(page)
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range headingRE.FindAllStringSubmatch(prose, -1) {
		h := strings.ToLower(strings.TrimSpace(m[1]))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r > 127:
				b.WriteRune(r)
			}
		}
		s := b.String()
		if n := seen[s]; n > 0 {
			out[s+"-"+itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// Every relative link and image of the README and the guide resolves, and
// every anchor names a heading of the page it points into.
func TestLinksAndAnchorsResolve(t *testing.T) {
	n := 0
	for _, pg := range pages(t) {
		text := read(t, pg)
		prose, _ := parse(text)
		prose = inlineRE.ReplaceAllString(prose, "")
		for _, m := range linkRE.FindAllStringSubmatch(prose, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			n++
			path, anchor, _ := strings.Cut(target, "#")
			file := pg
			if path != "" {
				file = filepath.Join(filepath.Dir(pg), path)
				if _, err := os.Stat(filepath.Join(root, file)); err != nil {
					t.Errorf("%s: link %s: %s does not exist", pg, target, file)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(file, ".md") {
				t.Errorf("%s: link %s: an anchor into %s, which is not a page", pg, target, file)
				continue
			}
			if !slugs(read(t, file))[anchor] {
				t.Errorf("%s: link %s: %s has no heading #%s", pg, target, file, anchor)
			}
		}
	}
	if n == 0 {
		t.Fatal("no links checked")
	}
}

// trimmed returns a text's lines without their indentation, blank ones
// left out.
func trimmed(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// contains reports whether want's lines appear in have, one after the
// other.
func contains(have, want []string) bool {
	for i := 0; i+len(want) <= len(have); i++ {
		ok := true
		for j := range want {
			if have[i+j] != want[j] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

var sampleRE = regexp.MustCompile(`^<!-- sample: (\S+) -->$`)

// Every Go sample comes from a file that make test compiles, and is found
// there line for line: change the code and the page fails here.
func TestGoSamplesAreFromCompiledFiles(t *testing.T) {
	n := 0
	for _, pg := range pages(t) {
		_, blocks := parse(read(t, pg))
		for _, b := range blocks {
			if b.lang != "go" {
				continue
			}
			n++
			m := sampleRE.FindStringSubmatch(b.mark)
			if m == nil {
				t.Errorf("%s:%d: a Go sample without <!-- sample: PATH --> before it: keep it in a file under test and name the file", pg, b.line)
				continue
			}
			src, err := os.ReadFile(filepath.Join(root, m[1]))
			if err != nil {
				t.Errorf("%s:%d: sample from %s: %v", pg, b.line, m[1], err)
				continue
			}
			if !strings.HasSuffix(m[1], ".go") {
				t.Errorf("%s:%d: sample from %s, which is not Go", pg, b.line, m[1])
			}
			if !contains(trimmed(string(src)), trimmed(b.text)) {
				t.Errorf("%s:%d: the sample is not in %s as it stands (copy it from there again)", pg, b.line, m[1])
			}
		}
	}
	if n == 0 {
		t.Fatal("no Go samples checked")
	}
}

var outputRE = regexp.MustCompile(`^<!-- output: (Test\w+) -->$`)

// testFiles returns every _test.go of the repository (every module).
func testFiles(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, "_test.go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[p] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Every sample of output is compared with what the code prints by the
// test its mark names, and that test's file names the page; a drawing in
// text says it is one.
func TestOutputSamplesAreChecked(t *testing.T) {
	tests := testFiles(t)
	for _, pg := range pages(t) {
		_, blocks := parse(read(t, pg))
		for _, b := range blocks {
			if b.lang != "" && b.lang != "text" {
				continue
			}
			if b.mark == "<!-- illustration -->" {
				continue
			}
			m := outputRE.FindStringSubmatch(b.mark)
			if m == nil {
				t.Errorf("%s:%d: a sample of output without <!-- output: TestName --> (the test that checks it) or <!-- illustration -->", pg, b.line)
				continue
			}
			found := false
			for file, src := range tests {
				if strings.Contains(src, "func "+m[1]+"(") {
					found = true
					if !strings.Contains(src, pg) {
						t.Errorf("%s:%d: %s (%s) does not read %s", pg, b.line, m[1], file, pg)
					}
				}
			}
			if !found {
				t.Errorf("%s:%d: no test %s", pg, b.line, m[1])
			}
		}
	}
}

// makeRE finds a make command: in inline code, or a shell block's line.
var makeRE = regexp.MustCompile("(?m)(?:`|^)(?:[A-Z_]+=\\S+ )*make ([a-z][a-z-]*)")

// Every make target the pages run exists.
func TestMakeTargetsExist(t *testing.T) {
	mk := read(t, "Makefile")
	n := 0
	for _, pg := range pages(t) {
		text := read(t, pg)
		for _, m := range makeRE.FindAllStringSubmatch(text, -1) {
			n++
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(m[1]) + `:`).MatchString(mk) {
				t.Errorf("%s: make %s: the Makefile has no such target", pg, m[1])
			}
		}
	}
	if n == 0 {
		t.Fatal("no make command found in the pages")
	}
}
