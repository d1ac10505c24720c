package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/presence"
)

// readmeBlock returns the README's code block that follows the line
// containing after, without its fences.
func readmeBlock(t *testing.T, after string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, after)
	if i < 0 {
		t.Fatalf("README.md has no %q", after)
	}
	s = s[i:]
	start := strings.Index(s, "```")
	s = s[start:]
	s = s[strings.Index(s, "\n")+1:]
	return s[:strings.Index(s, "```")]
}

// The README's samples of nandi's output are what the code prints:
// rendered by the functions status and watch print with, from the values
// the samples show.
func TestReadmeSamplesAreRealOutput(t *testing.T) {
	now := time.Date(2026, 12, 3, 11, 50, 9, 0, time.UTC)
	since := now.Add(-4200 * time.Millisecond)
	s := &Status{ServerTime: now, Workers: []presence.Record{
		{Worker: "mail-sender-7f9c-c", Held: true, Index: 0, Replicas: 4, Token: 1796298610000, Since: since, Handled: 134,
			Version: "(devel)", Oldest: []float64{0}, LagSeconds: []float64{0.4}},
		{Worker: "mail-sender-7f9c-b", Held: true, Index: 1, Replicas: 4, Token: 1796298610000, Since: since, Handled: 132, Failed: 19,
			Version: "(devel)", Oldest: []float64{3.9}, LagSeconds: []float64{12.5},
			LastError: "13: smtp: 451 4.7.1 greylisted, try again later", LastErrorAt: now.Add(-time.Second)},
		{Worker: "mail-sender-7f9c-a", Held: true, Index: 2, Replicas: 4, Token: 1796298610000, Since: since, Handled: 133,
			Version: "(devel)", Oldest: []float64{0}, LagSeconds: []float64{0.2}},
		{Worker: "mail-sender-5b2e-x", Held: true, Index: 3, Replicas: 4, Token: 1796298610000, Since: now.Add(-3500 * time.Millisecond),
			Version: "(devel)", Oldest: []float64{0}, LagSeconds: []float64{0}},
	}}
	var out bytes.Buffer
	printWorkers(&out, s)
	if want := readmeBlock(t, "`nandi status` lists the workers"); out.String() != want {
		t.Errorf("README's nandi status sample:\n%s\nwhat printWorkers prints:\n%s", want, out.String())
	}

	out.Reset()
	out.WriteString(watchHeader + "\n")
	gen := "1g4g8r6h1eq14.2:83"
	out.WriteString(watchLine(time.Date(2026, 12, 3, 11, 50, 8, 130e6, time.UTC), 1796298607, 3, 3, gen, "1 (3 replicas)", []string{"-"}))
	out.WriteString(watchLine(time.Date(2026, 12, 3, 11, 50, 9, 127e6, time.UTC), 1796298608, 4, 3, gen, "1 (3 replicas)",
		[]string{"REBALANCE 3 -> 4", "joined: mail-sender-5b2e-x"}))
	out.WriteString(watchLine(time.Date(2026, 12, 3, 11, 50, 10, 127e6, time.UTC), 1796298609, 4, 4, gen, "2 (4 replicas)", []string{"-"}))
	if want := readmeBlock(t, "`nandi watch` marks each rebalance"); out.String() != want {
		t.Errorf("README's nandi watch sample:\n%s\nwhat watch prints:\n%s", want, out.String())
	}
}

// The README's samples of commands run against Redis are their output,
// with the times, tokens and entry IDs of that run.
func TestReadmeCommandSamples(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	stamp := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	_, out, errOut := nandi(t, context.Background(), "pause", "-redis", url, "-group", "paused", "-reason", "smtp provider down")
	want := readmeBlock(t, "`nandi_consumer_paused_since_seconds` say each worker")
	want = strings.SplitN(want, "\n", 2)[1] // after the command line
	if got := stamp.ReplaceAllString(out, "T"); got != stamp.ReplaceAllString(want, "T") {
		t.Errorf("README's nandi pause sample:\n%s\nwhat nandi pause prints:\n%s%s", want, out, errOut)
	}
}
