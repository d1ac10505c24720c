// Command mail-sender is nandi's demo: an outbox of mails in a Redis stream,
// sent over SMTP by a fleet of workers that scales while it works, each
// with its own lease and consumer, and a report of what the SMTP sink
// received: every mail exactly once.
//
//	go run ./examples/mail-sender                   # embedded Redis and SMTP sink
//	go run ./examples/mail-sender -redis redis://localhost:6379 -smtp localhost:1025
//	go run ./examples/mail-sender -role producer -redis redis://localhost:6379
//	go run ./examples/mail-sender -role worker -redis redis://localhost:6379 -smtp localhost:1025 [-http :9090]
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
}

func main() {
	var cfg config
	var schedule string
	flag.StringVar(&cfg.redisURL, "redis", "", "Redis URL (default: an embedded Redis)")
	flag.StringVar(&cfg.smtpAddr, "smtp", "", "SMTP host:port to send to (default: an embedded SMTP sink)")
	flag.StringVar(&cfg.role, "role", "demo", "demo (producer, fleet and report), worker (one worker process) or producer (fill the outbox)")
	flag.IntVar(&cfg.mails, "mails", 3000, "mails the producer writes")
	flag.DurationVar(&cfg.interval, "interval", 500*time.Millisecond, "lease interval")
	flag.StringVar(&schedule, "schedule", "3,6,2", "fleet sizes, one phase each")
	flag.DurationVar(&cfg.phase, "phase", 4*time.Second, "length of each phase of the schedule")
	flag.IntVar(&cfg.rate, "rate", 400, "mails per second the producer writes")
	flag.StringVar(&cfg.group, "group", "mail-sender", "group name")
	flag.StringVar(&cfg.stream, "stream", "outbox", "stream of the outbox")
	flag.StringVar(&cfg.http, "http", "", "-role worker: serve Prometheus /metrics and the /ready and /holding probes on this address, for example :9090")
	flag.Parse()
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
	default:
		err = fmt.Errorf("-role %q: want demo, worker or producer", cfg.role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mail-sender:", err)
		os.Exit(2)
	}
}
