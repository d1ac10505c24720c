// Command mail-sender is nandi's demo: an outbox of mails in a Redis stream,
// sent over SMTP by a fleet of workers that scales while it works, each
// with its own lease and consumer, and a report of what the SMTP sink
// received: every mail exactly once.
//
// From examples/ (a module of its own):
//
//	go run ./mail-sender                   # embedded Redis and SMTP sink
//	go run ./mail-sender -redis redis://localhost:6379 -smtp localhost:1025
//	go run ./mail-sender -role sink -smtp 127.0.0.1:1025        # the SMTP sink alone, counting what it receives
//	go run ./mail-sender -role producer -redis redis://localhost:6379
//	go run ./mail-sender -role worker -redis redis://localhost:6379 -smtp 127.0.0.1:1025 [-http :9090]
//
// The demo on a Redis of yours (-redis) uses a stream and a group of its
// own, named after the run (outbox-RUN, mail-sender-RUN), so that what a
// producer left there, or an earlier demo, is never counted; with -stream
// or -group given, it refuses a stream that already holds entries. The
// by-hand fleet (-role producer, worker, sink) shares -stream and -group
// (outbox, mail-sender by default).
//
// With no flags it runs on an embedded Redis (miniredis, which runs nandi's
// scripts) and a local SMTP sink (go-smtp) that really receives the mails.
// The fleet goes 3 -> 6 -> 2 workers. -interval (default 500ms) is the
// lease interval: shorter makes the demo quick and its rebalances visible;
// in production a few seconds is usual, since a new worker waits two
// intervals and every change of membership costs the group about one.
//
// The exit status is 1 when the sink received a mail twice or not at all.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type config struct {
	redisURL string
	smtpAddr string
	role     string
	mails    int
	interval time.Duration
	schedule []int
	phase    time.Duration
	rate     int
	group    string
	stream   string
	plain    bool   // plain log lines instead of the live view
	http     string // -role worker: serve /metrics, /ready and /holding here

	groupSet, streamSet bool // -group, -stream given
}

func main() {
	var cfg config
	var schedule string
	flag.StringVar(&cfg.redisURL, "redis", "", "Redis URL (default: an embedded Redis)")
	flag.StringVar(&cfg.smtpAddr, "smtp", "", "SMTP host:port to send to (default: an embedded SMTP sink)")
	flag.StringVar(&cfg.role, "role", "demo", "demo (producer, fleet and report), worker (one worker process), producer (fill the outbox) or sink (an SMTP sink that counts what it receives, on -smtp)")
	flag.IntVar(&cfg.mails, "mails", 3000, "mails the producer writes")
	flag.DurationVar(&cfg.interval, "interval", 500*time.Millisecond, "lease interval")
	flag.StringVar(&schedule, "schedule", "3,6,2", "fleet sizes, one phase each")
	flag.DurationVar(&cfg.phase, "phase", 4*time.Second, "length of each phase of the schedule")
	flag.IntVar(&cfg.rate, "rate", 400, "mails per second the producer writes")
	flag.StringVar(&cfg.group, "group", "mail-sender", "group name (the demo on -redis: mail-sender-RUN unless given)")
	flag.StringVar(&cfg.stream, "stream", "outbox", "stream of the outbox (the demo on -redis: outbox-RUN unless given)")
	flag.StringVar(&cfg.http, "http", "", "-role worker: serve Prometheus /metrics and the /ready and /holding probes on this address, for example :9090")
	flag.Parse()
	flag.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "group":
			cfg.groupSet = true
		case "stream":
			cfg.streamSet = true
		}
	})
	for _, f := range strings.Split(schedule, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "mail-sender: -schedule %q: want fleet sizes like 3,6,2\n", schedule)
			os.Exit(2)
		}
		cfg.schedule = append(cfg.schedule, n)
	}
	if fi, err := os.Stdout.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		cfg.plain = true
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cfg.role {
	case "demo":
		var rep report
		rep, err = demo(ctx, cfg, os.Stdout)
		if err == nil && !rep.ok() {
			os.Exit(1)
		}
	case "worker":
		err = workerProcess(ctx, cfg, os.Stdout)
	case "producer":
		err = producerProcess(ctx, cfg, os.Stdout)
	case "sink":
		err = sinkProcess(ctx, cfg, os.Stdout)
	default:
		err = fmt.Errorf("-role %q: want demo, worker, producer or sink", cfg.role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mail-sender:", err)
		os.Exit(2)
	}
}
