package transport_test

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nandi-go/nandi/transport"
)

// vectors reads docs/transports.md's table of TaskID vectors: key ->
// TaskID, % 12, % 48.
func vectors(t *testing.T) (keys []string, want [][3]uint64) {
	t.Helper()
	b, err := os.ReadFile("../docs/transports.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "<!-- vectors: TaskID -->")
	if !ok {
		t.Fatal("docs/transports.md has no <!-- vectors: TaskID --> table")
	}
	row := regexp.MustCompile("(?m)^\\| (`[^`]*`|\\(empty\\)) \\| (\\d+) \\| (\\d+) \\| (\\d+) \\|$")
	for _, m := range row.FindAllStringSubmatch(strings.SplitN(table, "\n\n", 2)[0], -1) {
		key := strings.Trim(m[1], "`")
		if m[1] == "(empty)" {
			key = ""
		}
		var w [3]uint64
		for i := range 3 {
			w[i], _ = strconv.ParseUint(m[2+i], 10, 64)
		}
		keys, want = append(keys, key), append(want, w)
	}
	if len(keys) < 8 {
		t.Fatalf("%d vectors read from docs/transports.md; want the table's", len(keys))
	}
	return keys, want
}

// The placement spec's vectors in docs/transports.md are TaskID's.
func TestTaskIDVectorsAsDocumented(t *testing.T) {
	keys, want := vectors(t)
	for i, k := range keys {
		id := transport.TaskID(k)
		if got := [3]uint64{id, id % 12, id % 48}; got != want[i] {
			t.Errorf("TaskID(%q) = %d (%% 12 = %d, %% 48 = %d); docs/transports.md says %v", k, got[0], got[1], got[2], want[i])
		}
	}
}

// The Node recipe's taskId in docs/transports.md gives the same ids
// (node, which this machine and CI have).
func TestTaskIDRecipeInNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("no node on PATH: the Node recipe of docs/transports.md is checked with it (install nodejs; .ci/run does)")
	}
	b, err := os.ReadFile("../docs/transports.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(b), "<!-- recipe: node -->\n```js\n")
	fn, _, ok := strings.Cut(rest, "\n}\n")
	if !ok || !strings.Contains(fn, "function taskId(key)") {
		t.Fatal("docs/transports.md's Node recipe has no function taskId")
	}
	keys, want := vectors(t)
	var js strings.Builder
	js.WriteString(fn + "\n}\n")
	for _, k := range keys {
		js.WriteString("console.log(String(taskId(" + strconv.Quote(k) + ")));\n")
	}
	out, err := exec.Command(node, "-e", js.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	got := strings.Fields(string(out))
	if len(got) != len(keys) {
		t.Fatalf("node printed %q; want one id per key", out)
	}
	for i, k := range keys {
		if got[i] != strconv.FormatUint(want[i][0], 10) {
			t.Errorf("the Node recipe's taskId(%q) = %s; TaskID is %d", k, got[i], want[i][0])
		}
	}
}
