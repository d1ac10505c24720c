package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/transport"
)

// The guide's report (docs/demos.md) is what report.print prints, from
// its figures.
func TestReadmeReportIsRealOutput(t *testing.T) {
	b, err := os.ReadFile("../../docs/demos.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "report (the SMTP sink received)")
	if i < 0 {
		t.Fatal("docs/demos.md shows no demo report")
	}
	want := s[i:]
	want = "\n" + want[:strings.Index(want, "```")]
	r := report{Mails: 3000, Received: 3000, FromSink: true, StandDown: 3560 * time.Millisecond, Rebalances: 2,
		Replicas: []string{"3 (1.0s)", "6 (5.0s)", "2 (9.6s)"}, Took: 13141 * time.Millisecond}
	var out bytes.Buffer
	r.print(&out)
	if out.String() != want {
		t.Errorf("docs/demos.md's report:\n%s\nwhat the demo prints:\n%s", want, out.String())
	}
}

// The demo on a Redis where -role producer already filled the outbox
// counts only its own mails (a stream and a group named after the run),
// and refuses a -stream that already holds entries instead of mixing
// them in.
func TestDemoOnAUsedRedisUsesItsOwnNames(t *testing.T) {
	mr := miniredis.RunT(t)
	url := "redis://" + mr.Addr()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := producerProcess(ctx, config{redisURL: url, stream: "outbox", mails: 50, rate: 10000}, &out); err != nil {
		t.Fatal(err)
	}
	cfg := config{redisURL: url, mails: 200, rate: 1000, interval: 200 * time.Millisecond, schedule: []int{2, 1}, phase: time.Second,
		group: "mail-sender", stream: "outbox", plain: true, role: "demo"}
	rep, err := demo(ctx, cfg, &out)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if !rep.FromSink || rep.Received != 200 || !rep.ok() || !strings.Contains(out.String(), "this run's own") {
		t.Fatalf("report %+v; want the run's own 200 mails, none twice, none missing\n%s", rep, out.String())
	}
	cfg.streamSet = true
	if _, err := demo(ctx, cfg, &out); err == nil || !strings.Contains(err.Error(), "already holds 50 entries") {
		t.Errorf("the demo with -stream outbox (50 entries there): %v; want it refused, saying so", err)
	}
}

// -role sink receives what workers send and says how many, and how many
// twice.
func TestSinkRole(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- sinkProcess(ctx, config{smtpAddr: addr}, &out) }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "SMTP sink on") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for _, key := range []string{"1", "2", "2"} {
		if err := send(context.Background(), addr, &transport.Message{Key: key, Payload: []byte("hello")}); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "stopped: received 3 mails, 2 distinct, 1 more than once") {
		t.Errorf("the sink said:\n%s\nwant 3 mails, 2 distinct, 1 more than once", out.String())
	}
}
