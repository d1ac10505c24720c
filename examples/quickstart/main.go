// Command quickstart is a complete nandi consumer: every worker started
// against the same Redis is a member of the group "quickstart" and shares
// the stream tasks, each task handled by exactly one worker at a time, in
// order per id. It logs to stderr that it waits for its lease, "serving"
// once it holds one, and each task it could not handle (an entry without
// an id goes to the group's dead-letter stream: nandi dead list -group
// quickstart shows it).
//
//	cd examples && go run ./quickstart -redis redis://localhost:6379     # start one, two, five...
//	redis-cli XADD tasks '*' id 42 payload 'hello'         # each entry: its task id, its payload
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/redis/go-redis/v9"
)

func main() {
	url := flag.String("redis", "redis://localhost:6379", "the group's Redis")
	flag.Parse()
	opts, err := redis.ParseURL(*url)
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(opts) // or NewFailoverClient (Sentinel), NewClusterClient
	defer client.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, client, handle, logger); err != nil {
		log.Fatal(err)
	}
}

// handle does one task. ctx ends when this worker's lease on the task's
// share runs out: pass it on, and return when it ends. Return nil once the
// effect is committed (the mail accepted, the row written), whatever
// cleanup fails after: an error makes the task run again.
func handle(ctx context.Context, m *transport.Message) error {
	a, _ := consumer.AssignmentFromContext(ctx) // the share, and its fencing token
	fmt.Printf("task %s: %s (share %d of %d, token %d)\n", m.Key, m.Payload, a.Index, a.Replicas, a.Token)
	return nil
}

// run serves the stream "tasks" under the group "quickstart" until ctx
// ends, then drains: running handlers finish, checkpoints are written, the
// lease is left for the others.
func run(ctx context.Context, client redis.UniversalClient, h consumer.Handler, logger *slog.Logger) error {
	lease, err := partition.New(client, partition.Options{Name: "quickstart", Logger: logger})
	if err != nil {
		return err
	}
	source, err := redisstream.New(client, "tasks", redisstream.Options{})
	if err != nil {
		return err
	}
	c, err := consumer.New(lease, source, h, consumer.Options{Concurrency: 8, Logger: logger})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}
