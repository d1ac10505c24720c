package docs

import (
	"regexp"
	"strings"
	"testing"
)

// numbers are the figures of a line (commas dropped), in order.
func numbers(line string) []string {
	var out []string
	for _, n := range regexp.MustCompile(`\d[\d,]*(\.\d+)?`).FindAllString(line, -1) {
		out = append(out, strings.ReplaceAll(n, ",", ""))
	}
	return out
}

// A figure of docs/handlers.md's pgsink speed table that no run printed
// is refused: the table is, row for row and figure for figure, the run
// that BenchmarkSinkFigures recorded (-record writes
// docs/figures/sinkfigures.txt, with the commit it ran at), and the page
// names that commit, the run's date and its plain commit's cost.
func TestSinkFiguresAreARecordedRun(t *testing.T) {
	const recorded = "docs/figures/sinkfigures.txt"
	run := strings.Split(strings.TrimSpace(read(t, recorded)), "\n")
	var rev string
	var rows [][]string
	for _, l := range run {
		switch {
		case strings.HasPrefix(l, "# BenchmarkSinkFigures at "):
			rev = strings.TrimPrefix(l, "# BenchmarkSinkFigures at ")
		case strings.HasPrefix(l, "#"), strings.HasPrefix(l, " "):
		default:
			rows = append(rows, numbers(l))
		}
	}
	if rev == "" || len(rows) < 2 {
		t.Fatalf("%s holds no recorded run: run the command it names", recorded)
	}
	if strings.HasSuffix(rev, "-dirty") {
		t.Errorf("%s was recorded from a tree with uncommitted changes (%s): record it again at a commit", recorded, rev)
	}
	head, rows := rows[0], rows[1:] // the date, the rows' count, the commit's cost
	page := read(t, "docs/handlers.md")
	i := strings.Index(page, "| loop | increments/s | vs autocommit |")
	if i < 0 {
		t.Fatal("docs/handlers.md has no pgsink speed table")
	}
	before := strings.TrimRight(page[:i], "\n")
	intro := before[strings.LastIndex(before, "\n\n"):]
	for _, want := range []string{rev, strings.Join(head[:3], "-"), head[len(head)-1]} {
		if !strings.Contains(strings.ReplaceAll(intro, ",", ""), want) {
			t.Errorf("the table's introduction does not say %q (the recorded run's commit, date and plain commit's cost):%s", want, intro)
		}
	}
	var table [][]string
	for _, l := range strings.Split(page[i:], "\n")[2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		table = append(table, numbers(l))
	}
	if len(table) != len(rows) {
		t.Fatalf("the table has %d rows, the recorded run %d", len(table), len(rows))
	}
	for r := range rows {
		if strings.Join(table[r], " ") != strings.Join(rows[r], " ") {
			t.Errorf("row %d of the table has the figures %v; the recorded run printed %v", r+1, table[r], rows[r])
		}
	}
}
