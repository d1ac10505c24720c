package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nandi-go/nandi/deadletter"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/presence"
)

func ptr[T any](v T) *T { return &v }

// readmeBlock returns the code block of the guide's CLI page
// (docs/cli.md) that follows the line containing after, without its
// fences.
func readmeBlock(t *testing.T, after string) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, after)
	if i < 0 {
		t.Fatalf("docs/cli.md has no %q", after)
	}
	s = s[i:]
	start := strings.Index(s, "```")
	s = s[start:]
	s = s[strings.Index(s, "\n")+1:]
	return s[:strings.Index(s, "```")]
}

// The guide's samples of nandi's output (docs/cli.md) are what the code prints:
// rendered by the functions status and watch print with, from the values
// the samples show.
func TestReadmeSamplesAreRealOutput(t *testing.T) {
	now := time.Date(2026, 12, 3, 11, 50, 9, 0, time.UTC)
	since := now.Add(-4200 * time.Millisecond)
	s := &Status{ServerTime: now, Workers: []presence.Record{
		{Worker: "mail-sender-7f9c-c", Held: true, Index: 0, Replicas: 4, Token: 1796298610000, Since: since, Handled: 134,
			Version: "(devel)", Oldest: []float64{0}, LagSeconds: []*float64{ptr[float64](0.4)}},
		{Worker: "mail-sender-7f9c-b", Held: true, Index: 1, Replicas: 4, Token: 1796298610000, Since: since, Handled: 132, Failed: 19,
			Version: "(devel)", Oldest: []float64{3.9}, LagSeconds: []*float64{ptr[float64](12.5)},
			LastError: "13: smtp: 451 4.7.1 greylisted, try again later", LastErrorAt: now.Add(-time.Second)},
		{Worker: "mail-sender-7f9c-a", Held: true, Index: 2, Replicas: 4, Token: 1796298610000, Since: since, Handled: 133,
			Version: "(devel)", Oldest: []float64{0}, LagSeconds: []*float64{ptr[float64](0.2)}},
		{Worker: "mail-sender-5b2e-x", Held: true, Index: 3, Replicas: 4, Token: 1796298610000, Since: now.Add(-3500 * time.Millisecond),
			Version: "(devel)", Oldest: []float64{0}, LagSeconds: []*float64{ptr[float64](0)}},
	}}
	var out bytes.Buffer
	printWorkers(&out, s)
	if want := readmeBlock(t, "`nandi status` lists the workers"); out.String() != want {
		t.Errorf("docs/cli.md's nandi status sample:\n%s\nwhat printWorkers prints:\n%s", want, out.String())
	}

	out.Reset()
	out.WriteString(watchHeader + "\n")
	gen := "1g4g8r6h1eq14.2:83"
	out.WriteString(watchLine(time.Date(2026, 12, 3, 11, 50, 8, 130e6, time.UTC), 1796298607, 3, 3, gen, "1 (3 replicas)", []string{"-"}))
	out.WriteString(watchLine(time.Date(2026, 12, 3, 11, 50, 9, 127e6, time.UTC), 1796298608, 4, 3, gen, "1 (3 replicas)",
		[]string{"REBALANCE 3 -> 4, handover to the end of this interval", "joined: mail-sender-5b2e-x"}))
	out.WriteString(watchLine(time.Date(2026, 12, 3, 11, 50, 10, 127e6, time.UTC), 1796298609, 4, 4, gen, "2 (4 replicas)", []string{"-"}))
	if want := readmeBlock(t, "`nandi watch` marks each rebalance"); out.String() != want {
		t.Errorf("docs/cli.md's nandi watch sample:\n%s\nwhat watch prints:\n%s", want, out.String())
	}
}

// The guide's samples of commands run against Redis (docs/cli.md) are their output,
// with the times, tokens and entry IDs of that run.
func TestReadmeCommandSamples(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	stamp := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	if _, err := srv.Do("XADD", deadletter.Stream("paused"), "*", "key", "k"); err != nil { // the group exists
		t.Fatal(err)
	}
	_, out, errOut := nandi(t, context.Background(), "pause", "-redis", url, "-group", "paused", "-reason", "smtp provider down")
	want := readmeBlock(t, "older than 4 hours.")
	want = strings.SplitN(want, "\n", 2)[1] // after the command line
	if got := stamp.ReplaceAllString(out, "T"); got != stamp.ReplaceAllString(want, "T") {
		t.Errorf("docs/cli.md's nandi pause sample:\n%s\nwhat nandi pause prints:\n%s%s", want, out, errOut)
	}
}

// docCommand returns the command line (without "$ ") and the output of the
// sample in docs/cli.md that begins with "$ nandi " + prefix.
func docCommand(t *testing.T, prefix string) (cmd, output string) {
	t.Helper()
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "$ nandi "+prefix)
	if i < 0 {
		t.Fatalf("docs/cli.md has no sample of nandi %s", prefix)
	}
	s = s[i+2:]
	s = s[:strings.Index(s, "```")]
	cmd, output, _ = strings.Cut(s, "\n")
	if j := strings.Index(output, "\n$ "); j >= 0 {
		output = output[:j+1]
	}
	return cmd, output
}

var digits = regexp.MustCompile(`\d+`)

// shape is a text's set of lines with every number, timestamp and run of
// spaces made alike: what stays the same from run to run.
func shape(s string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(s, "\n") {
		if l = strings.Join(strings.Fields(digits.ReplaceAllString(l, "N")), " "); l != "" {
			out[l] = true
		}
	}
	return out
}

// sameShape fails the test unless the guide's sample and the real output
// have the same lines but for their numbers.
func sameShape(t *testing.T, what, doc, real string) {
	t.Helper()
	d, r := shape(doc), shape(real)
	for l := range d {
		if !r[l] {
			t.Errorf("docs/cli.md's sample of %s has a line the real output does not: %q\nreal output:\n%s", what, l, real)
		}
	}
	for l := range r {
		if !d[l] {
			t.Errorf("the real output of %s has a line docs/cli.md's sample does not: %q\nsample:\n%s", what, l, doc)
		}
	}
}
