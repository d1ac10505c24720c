package watermillmetrics_test

import (
	"fmt"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/metrics"
	"github.com/nandi-go/nandi/metrics/watermillmetrics"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/watermillfilter"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// A Filter's series on a registry of yours, beside the lease's: what a
// scrape of /metrics reads (promhttp.HandlerFor(reg, ...)).
func Example() {
	mr := miniredis.NewMiniRedis() // here miniredis; any Redis
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	lease, err := partition.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), partition.Options{Name: "webhooks"})
	if err != nil {
		panic(err)
	}
	filter := watermillfilter.New(lease, watermillfilter.Options{})
	reg := prometheus.NewRegistry()
	if err := metrics.RegisterLease(reg, lease, metrics.Options{}); err != nil {
		panic(err)
	}
	if err := watermillmetrics.Register(reg, filter, metrics.Options{}); err != nil {
		panic(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if name := mf.GetName(); strings.HasPrefix(name, "nandi_filter_") {
			fmt.Println(name, mf.GetType())
		}
	}
	// Output:
	// nandi_filter_in_flight GAUGE
	// nandi_filter_messages_total COUNTER
	// nandi_filter_overdue_handlers_total COUNTER
	// nandi_filter_panics_total COUNTER
}
