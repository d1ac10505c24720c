package pgsink_test

import (
	"context"
	"log"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/sink/pgsink"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/redis/go-redis/v9"
)

// A consumer of payments whose effects commit exactly once: each
// payment's UPDATE and its record as done in one transaction. (It needs a
// PostgreSQL and a Redis: examples/payments runs it end to end.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	sink, err := pgsink.New(ctx, pool, pgsink.Options{
		Group:       "payments",
		Checkpoints: checkpoint.NewRedis(client, "payments"), // lets the sink forget old records
	})
	if err != nil {
		log.Fatal(err)
	}
	apply := sink.Handler(func(ctx context.Context, tx pgx.Tx, m *transport.Message) error {
		amount, err := strconv.Atoi(string(m.Payload))
		if err != nil {
			return consumer.Permanent(err)
		}
		_, err = tx.Exec(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", amount, m.Key)
		return err
	})
	lease, _ := partition.New(client, partition.Options{Name: "payments"})
	source, _ := redisstream.New(client, "payments", redisstream.Options{})
	c, err := consumer.New(lease, source, apply, consumer.Options{Concurrency: 8})
	if err != nil {
		log.Fatal(err)
	}
	_ = c.Run(ctx)
}
