package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// The demo end to end with a short schedule: embedded Redis and SMTP sink,
// the fleet 2 -> 3 -> 1, every mail received exactly once.
func TestDemoSendsEveryMailExactlyOnce(t *testing.T) {
	var out bytes.Buffer
	cfg := config{mails: 400, rate: 1000, interval: 200 * time.Millisecond, schedule: []int{2, 3, 1}, phase: 1500 * time.Millisecond, group: "demo-test", stream: "outbox", plain: true, role: "demo"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := demo(ctx, cfg, &out)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if !rep.FromSink || rep.Received != 400 || !rep.ok() {
		t.Fatalf("report %+v; want 400 mails received by the sink, none twice, none missing\n%s", rep, out.String())
	}
	if rep.Rebalances < 2 {
		t.Errorf("%d rebalances seen; the schedule 2 -> 3 -> 1 makes two\n%s", rep.Rebalances, out.String())
	}
	if !strings.Contains(out.String(), "every mail exactly once") {
		t.Errorf("the report does not say so:\n%s", out.String())
	}
}
