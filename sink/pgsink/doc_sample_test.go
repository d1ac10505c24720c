package pgsink_test

// The guide's sample of the sink (docs/handlers.md), compiled here, in the
// module that has pgx; internal/docs finds it in this file.

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/metrics"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/sink/pgsink"
	"github.com/nandi-go/nandi/transport"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

var (
	amount  func(m *transport.Message) int64
	account func(m *transport.Message) int64
)

func sampleSink(ctx context.Context, pool *pgxpool.Pool, client redis.UniversalClient, lease *partition.Lease, source transport.Source, reg prometheus.Registerer) (*consumer.Consumer, error) {
	sink, err := pgsink.New(ctx, pool, pgsink.Options{Group: "payments", Checkpoints: checkpoint.NewRedis(client, "payments")})
	if err != nil {
		return nil, err
	}
	h := sink.Handler(func(ctx context.Context, tx pgx.Tx, m *transport.Message) error {
		_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + $1 WHERE id = $2`, amount(m), account(m))
		return err // the effect's boundary is the sink's commit
	})
	c, err := consumer.New(lease, source, h, consumer.Options{Concurrency: 8})
	if err != nil {
		return nil, err
	}
	_ = metrics.RegisterSink(reg, "payments", func() metrics.SinkStats {
		s := sink.Stats()
		return metrics.SinkStats{Applied: s.Applied, AlreadyDone: s.AlreadyDone, Fenced: s.Fenced, Failed: s.Failed}
	}, metrics.Options{})
	return c, nil
}

// Compiled, never run: it needs the servers of a reader's own.
var _ = sampleSink
