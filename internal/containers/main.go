// Command containers runs a test server in a container with
// testcontainers-go, for the test harnesses (internal/redistest) when no
// server binary is on PATH and a Docker engine answers. It is a module of
// its own so that testcontainers-go and Docker's client stay out of the
// module graph of nandi's packages: a user of nandi never fetches them.
//
//	go run . health           exit 0 when a Docker engine answers
//	go run . redis [ARGS...]  start redis:7 with ARGS; print its address
//
// With redis, it then reads commands from stdin, one per line, answering
// each with the server's address: "restart" stops and starts the
// container (a new address), "addr" says it again. At EOF (the test's end)
// it terminates the container and exits.
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: containers health | redis [ARGS...]")
		os.Exit(2)
	}
	ctx := context.Background()
	switch os.Args[1] {
	case "health":
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		p, err := testcontainers.ProviderDefault.GetProvider()
		if err != nil {
			os.Exit(1)
		}
		defer p.Close()
		if p.Health(hctx) != nil {
			os.Exit(1)
		}
	case "redis":
		if err := redis(ctx, os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "containers:", err)
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "containers: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

func redis(ctx context.Context, args []string) error {
	ctr, err := tcredis.Run(ctx, "redis:7", testcontainers.WithCmdArgs(args...))
	if err != nil {
		return fmt.Errorf("starting a Redis container: %w", err)
	}
	defer func() { _ = ctr.Terminate(context.Background()) }()
	addr := func() error {
		cs, err := ctr.ConnectionString(ctx)
		if err != nil {
			return err
		}
		fmt.Println(strings.TrimPrefix(cs, "redis://"))
		return nil
	}
	if err := addr(); err != nil {
		return err
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "restart":
			timeout := time.Duration(0)
			if err := ctr.Stop(ctx, &timeout); err != nil {
				return err
			}
			if err := ctr.Start(ctx); err != nil {
				return err
			}
		case "addr":
		default:
			return fmt.Errorf("unknown command %q", in.Text())
		}
		if err := addr(); err != nil {
			return err
		}
	}
	return nil
}
