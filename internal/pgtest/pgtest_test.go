package pgtest

import (
	"context"
	"strings"
	"testing"
)

// The server starts, answers, survives a kill -9 with what it committed,
// and a clean stop.
func TestStartKillRestart(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	if out, err := s.Exec(ctx, "CREATE TABLE x (v int); INSERT INTO x VALUES (42)"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	s.Kill()
	s.Restart()
	out, err := s.Exec(ctx, "SELECT v FROM x")
	if err != nil || strings.TrimSpace(out) != "42" {
		t.Fatalf("after kill -9 and restart: %q, %v; want 42", out, err)
	}
	s.Stop()
	s.Restart()
	if out, err := s.Exec(ctx, "SELECT v FROM x"); err != nil || strings.TrimSpace(out) != "42" {
		t.Fatalf("after a stop and restart: %q, %v; want 42", out, err)
	}
}
