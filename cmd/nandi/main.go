package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage:
  nandi status -redis URL -group NAME [-json]   the group's settings, counts, generation and checkpoints
  nandi watch  -redis URL -group NAME           the same, one line per interval
  nandi plan   -interval 5s -gap 0.125 -rtt 2ms -jitter 1ms -workers 200 [-redis URL]
                                                what the settings cost, and whether they fit the network
  nandi pause  -redis URL -group NAME [-reason TEXT]
                                                every worker finishes what runs and starts nothing, keeping its lease
  nandi resume -redis URL -group NAME           end the pause
  nandi dead list   -redis URL -group NAME [-stream DEAD] [-json]   the group's dead letters
  nandi dead replay -redis URL -group NAME -to S0,S1,... (-id ID,... | -all)
                                                put dead letters back on the source streams
  nandi checkpoint reset -redis URL -group NAME -to start|end|time:T|POSITION [-streams S,...] [-dry-run]
                                                move a stopped group's checkpoints (a new epoch)
  nandi web    -redis URL [-addr 127.0.0.1:8080] [-group NAME] [-token T] [-tls-cert F -tls-key F]
                                                a live page per group, read-only (beyond localhost only with a token)
URL: redis://host:port[/db] (a server or any Cluster node), redis+cluster://host:port,
     redis+sentinel://sentinel:26379?master_name=NAME[&addr=sentinel2:26379]; rediss for TLS
`

func run(ctx context.Context, args []string, out, errOut io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(errOut, usage)
		return 2
	}
	switch args[0] {
	case "status":
		return cmdStatus(ctx, args[1:], out, errOut)
	case "watch":
		return cmdWatch(ctx, args[1:], out, errOut)
	case "plan":
		return cmdPlan(ctx, args[1:], out, errOut)
	case "web":
		return cmdWeb(ctx, args[1:], out, errOut)
	case "pause":
		return cmdPause(ctx, args[1:], out, errOut)
	case "resume":
		return cmdResume(ctx, args[1:], out, errOut)
	case "checkpoint":
		return cmdCheckpoint(ctx, args[1:], out, errOut)
	case "dead":
		return cmdDead(ctx, args[1:], out, errOut)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(out, usage)
		return 0
	}
	fmt.Fprintf(errOut, "nandi: unknown command %q\n%s", args[0], usage)
	return 2
}
