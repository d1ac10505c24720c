package metrics_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/alicebob/miniredis/v2"
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

// A worker's metrics beside the Go runtime's and the process's, served at
// /metrics; here on miniredis and an in-memory log of 3 tasks, read after
// they are handled.
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	lease, err := partition.New(client, partition.Options{Name: "mail-sender", Interval: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	log := memory.NewLog(1)
	for i := range 3 {
		log.Append(fmt.Sprint(i), nil)
	}
	send := func(ctx context.Context, m *transport.Message) error { return nil }
	c, err := consumer.New(lease, log.Source(), send, consumer.Options{})
	if err != nil {
		panic(err)
	}
	// The Go runtime's and the process's collectors beside nandi's. No
	// pod label: Prometheus's service discovery adds pod and namespace as
	// target labels (a const label named pod would become exported_pod).
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := metrics.Register(reg, c, metrics.Options{}); err != nil {
		panic(err)
	}
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{})) // and http.ListenAndServe(":9090", nil)

	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	for c.Stats().Handled < 3 {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-ran
	mfs, err := reg.Gather() // what a scrape of /metrics reads
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "nandi_consumer_messages_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if l := m.GetLabel(); len(l) > 0 && l[len(l)-1].GetValue() == "handled" {
				fmt.Println("nandi_consumer_messages_total{outcome=\"handled\"}", m.GetCounter().GetValue())
			}
		}
	}
	// Output:
	// nandi_consumer_messages_total{outcome="handled"} 3
}
