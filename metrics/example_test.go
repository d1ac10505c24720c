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
	"github.com/prometheus/client_golang/prometheus/collectors"
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
	// The Go runtime's and the process's collectors beside nandi's. No
	// pod label: Prometheus's service discovery adds pod and namespace as
	// target labels (a const label named pod would become exported_pod).
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := metrics.Register(reg, c, metrics.Options{}); err != nil {
		log.Fatal(err)
	}
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// go c.Run(ctx); http.ListenAndServe(":9090", nil)
}
