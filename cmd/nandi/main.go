// Command nandi inspects a running group and plans a new one.
//
//	nandi status -redis redis://localhost:6379 -group mail-sender [-json]
//	nandi watch  -redis redis://localhost:6379 -group mail-sender
//	nandi plan   -interval 5s -gap 0.125 -rtt 2ms -jitter 1ms -workers 200 [-redis URL]
//
// status prints the group's settings, the counts of the intervals its hash
// keeps, the store generation, and the checkpoint epochs with each index's
// positions. watch prints one line per interval. plan says what a setting
// costs (time to a first lease, stand-down per change, spacing of
// registrations) and whether the network fits inside the gap; with -redis
// it measures the round trip itself. It exits 1 on a verdict of FAIL, 2 on
// bad usage.
//
// -redis takes a server, a Redis Cluster or Sentinels, in go-redis's URL
// forms:
//
//	redis://[user:pass@]host:port[/db]              a server, or any node of a Cluster
//	redis+cluster://host:port[?addr=host2:port2]   a Cluster (also: redis://...?addr=...)
//	redis://sentinel:26379?master_name=mymaster[&addr=sentinel2:26379]
//	redis+sentinel://sentinel:26379?master_name=mymaster
//
// rediss (rediss+cluster, rediss+sentinel) for TLS. A plain URL to a node
// of a Cluster is found out (INFO cluster) and read through a cluster
// client.
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
	case "help", "-h", "-help", "--help":
		fmt.Fprint(out, usage)
		return 0
	}
	fmt.Fprintf(errOut, "nandi: unknown command %q\n%s", args[0], usage)
	return 2
}
