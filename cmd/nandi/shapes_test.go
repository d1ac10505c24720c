package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/deadletter"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
)

// documentedShapes reads the table of docs/cli.md's "JSON shapes": key ->
// shape.
func documentedShapes(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "## JSON shapes")
	if i < 0 {
		t.Fatal(`docs/cli.md has no "## JSON shapes"`)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9_]+)` \\| ([a-z ]+) \\|")
	out := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(s[i:], -1) {
		out[m[1]] = strings.TrimSpace(m[2])
	}
	return out
}

// checkShape checks v against shape ("string", "number", "boolean",
// "object", "array of T", "map of T", each optionally "or null"), and the
// keys of every object in it against docs; it returns what differs.
func checkShape(where string, v any, shape string, docs map[string]string) []string {
	if base, ok := strings.CutSuffix(shape, " or null"); ok {
		if v == nil {
			return nil
		}
		shape = base
	}
	bad := func() []string { return []string{fmt.Sprintf("%s: %s is not %s", where, short(v), shape)} }
	switch {
	case strings.HasPrefix(shape, "array of "):
		a, ok := v.([]any)
		if !ok {
			return bad()
		}
		var out []string
		for i, e := range a {
			out = append(out, checkShape(fmt.Sprintf("%s[%d]", where, i), e, strings.TrimPrefix(shape, "array of "), docs)...)
		}
		return out
	case strings.HasPrefix(shape, "map of "):
		m, ok := v.(map[string]any)
		if !ok {
			return bad()
		}
		var out []string
		for k, e := range m {
			out = append(out, checkShape(where+"["+k+"]", e, strings.TrimPrefix(shape, "map of "), docs)...)
		}
		return out
	case shape == "object":
		m, ok := v.(map[string]any)
		if !ok {
			return bad()
		}
		var out []string
		for k, e := range m {
			ks, known := docs[k]
			if !known {
				out = append(out, fmt.Sprintf("%s.%s: a key docs/cli.md's JSON shapes do not have", where, k))
				continue
			}
			out = append(out, checkShape(where+"."+k, e, ks, docs)...)
		}
		return out
	case shape == "string":
		if _, ok := v.(string); !ok {
			return bad()
		}
	case shape == "number":
		if _, ok := v.(float64); !ok {
			return bad()
		}
	case shape == "boolean":
		if _, ok := v.(bool); !ok {
			return bad()
		}
	default:
		return []string{fmt.Sprintf("%s: docs/cli.md gives the unknown shape %q", where, shape)}
	}
	return nil
}

func short(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 60 {
		b = append(b[:57], "..."...)
	}
	return string(b)
}

// Every -json output, the web page's API and nandi scaler's answer use
// the shapes docs/cli.md documents, one per key: run on a group with a
// worker, checkpoints, a dead letter and a pause, and on one with dead
// letters only. The check is able to fail: a -1 for an unknown count, a
// number where the table says array, a key it lacks are each refused.
func TestEveryJSONOutputHasTheDocumentedShapes(t *testing.T) {
	docs := documentedShapes(t)
	for name, c := range map[string]struct {
		json  string
		shape string
	}{
		"a count as workers": {`{"lag": [{"shard": 0, "entries": null, "source": "s"}], "workers": 3}`, "object"},
		"an unknown key":     {`{"group": "g", "worker_count_total": 1}`, "object"},
		"a pause as a bool":  {`{"paused": true}`, "object"},
	} {
		var v any
		if err := json.Unmarshal([]byte(c.json), &v); err != nil {
			t.Fatal(err)
		}
		if problems := checkShape(name, v, c.shape, docs); len(problems) == 0 {
			t.Errorf("%s: the check accepted %s", name, c.json)
		}
	}

	srv := redistest.Start(t)
	c := srv.Client()
	bg := context.Background()
	src, _ := redisstream.New(c, "jobs", redisstream.Options{})
	p, _ := src.Producer(redisstream.ProducerOptions{})
	for _, k := range []string{"a", "bad", "b"} {
		if err := p.Publish(bg, k, []byte(k), map[string]string{"tenant": "acme"}); err != nil {
			t.Fatal(err)
		}
	}
	l, _ := partition.New(c, partition.Options{Name: "jobs", Interval: 200 * time.Millisecond})
	cs, _ := consumer.New(l, src, func(_ context.Context, m *transport.Message) error {
		if m.Key == "bad" {
			return consumer.Permanent(errors.New("no such customer"))
		}
		return nil
	}, consumer.Options{CheckpointInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(bg)
	done := make(chan struct{})
	go func() { _ = cs.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	redistest.WaitFor(t, 10*time.Second, "a dead letter and the worker's record", func() bool {
		st, err := readStatus(bg, c, "jobs")
		return err == nil && st.Dead == 1 && len(st.Workers) == 1 && len(st.Epochs) > 0
	})
	if _, err := consumer.Pause(bg, c, "jobs", "maintenance"); err != nil {
		t.Fatal(err)
	}
	if err := writeDeadLetter(c, "stopped"); err != nil { // a group of dead letters only
		t.Fatal(err)
	}
	ls, _ := deadletter.List(bg, c, deadletter.Stream("jobs"), "-", "+", 1)
	url := "redis://" + srv.Addr()
	outputs := map[string]string{}
	for _, args := range [][]string{{"groups", "-json"}, {"status", "-json", "-group", "jobs"}, {"status", "-json", "-group", "stopped"},
		{"dead", "list", "-json", "-group", "jobs"}, {"dead", "show", "-json", "-group", "jobs", ls[0].ID}} {
		n := len(args)
		if args[0] == "dead" && args[1] == "show" {
			n-- // the ID comes after the flags
		}
		code, out, errOut := nandi(t, bg, append(append(args[:n:n], "-redis", url), args[n:]...)...)
		if code != 0 {
			t.Fatalf("nandi %v: exit %d: %s", args, code, errOut)
		}
		outputs["nandi "+strings.Join(args, " ")] = out
	}
	ws := newWebServer(c, "", "")
	web := httptest.NewServer(ws.handler())
	defer web.Close()
	defer ws.Close()
	s := &scaler{lease: c, logs: &logs{redis: c}, log: slog.New(slog.DiscardHandler), readings: map[string]*reading{}}
	sc := httptest.NewServer(s.handler())
	defer sc.Close()
	for _, u := range []string{web.URL + "/api/groups", web.URL + "/api/g/jobs", web.URL + "/api/g/stopped", web.URL + "/api/g/jobs/dead/" + ls[0].ID,
		web.URL + "/api/session", sc.URL + "/keda/jobs"} {
		res, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", u, res.StatusCode, b)
		}
		outputs["GET "+u] = string(b)
	}
	for where, out := range outputs {
		var v any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%s: not JSON: %v\n%s", where, err, out)
		}
		shape := "object"
		if _, ok := v.([]any); ok {
			shape = "array of object"
			if strings.HasSuffix(where, "/api/groups") {
				shape = "array of string"
			}
		}
		for _, p := range checkShape(where, v, shape, docs) {
			t.Error(p)
		}
		if strings.Contains(out, ": -1") || strings.Contains(out, "[-1") {
			t.Errorf("%s has a -1 for an unknown value:\n%s", where, out)
		}
	}
}
