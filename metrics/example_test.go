package metrics_test

import (
	"context"
	"log"
	"net/http"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/metrics"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

func Example() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	lease, err := partition.New(client, partition.Options{Name: "mail-sender"})
	if err != nil {
		log.Fatal(err)
	}
	send := func(ctx context.Context, m *transport.Message) error { return nil }
	c, err := consumer.New(lease, memory.NewLog(1).Source(), send, consumer.Options{})
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := metrics.Register(reg, c, metrics.Options{ConstLabels: prometheus.Labels{"pod": "mail-sender-0"}}); err != nil {
		log.Fatal(err)
	}
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// go c.Run(ctx); http.ListenAndServe(":9090", nil)
}
