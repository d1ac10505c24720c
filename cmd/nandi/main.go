package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

func main() {
	// SIGTERM (a pod stopping, systemd) ends a command as ^C does: watch
	// and web stop and exit 0.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// go-redis logs its pool's dial failures itself; the CLI says what
	// failed in one line of its own.
	redis.SetLogger(quiet{})
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func run(ctx context.Context, args []string, out, errOut io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(errOut, usage())
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		return cmdHelp(ctx, args[1:], out, errOut)
	case "-version", "--version":
		return cmdVersion(ctx, args[1:], out, errOut)
	case "dead":
		return cmdDead(ctx, args[1:], out, errOut)
	case "checkpoint":
		return cmdCheckpoint(ctx, args[1:], out, errOut)
	}
	if c, ok := lookup(args[0]); ok && c.run != nil {
		return c.run(ctx, args[1:], out, errOut)
	}
	fmt.Fprintf(errOut, "nandi: unknown command %q%s (nandi help lists them)\n", args[0], suggest(strings.TrimLeft(args[0], "-")))
	return exitUsage
}

// subcommand dispatches a command with subcommands (dead, checkpoint):
// its first argument names one; -h or none lists them.
func subcommand(ctx context.Context, parent string, args []string, out, errOut io.Writer, subs map[string]func(context.Context, []string, io.Writer, io.Writer) int) int {
	if len(args) > 0 {
		if f, ok := subs[args[0]]; ok {
			return f(ctx, args[1:], out, errOut)
		}
		switch args[0] {
		case "-h", "-help", "--help", "help":
			return cmdHelp(ctx, []string{parent}, out, errOut)
		}
		fmt.Fprintf(errOut, "nandi %s: unknown subcommand %q\n", parent, args[0])
	} else {
		fmt.Fprintf(errOut, "nandi %s: a subcommand is required\n", parent)
	}
	cmdHelp(ctx, []string{parent}, errOut, errOut)
	return exitUsage
}
