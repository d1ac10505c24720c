package health_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/health"
	"github.com/nandi-go/nandi/partition"
	"github.com/redis/go-redis/v9"
)

// Probes of a worker: /ready answers 200 while the lease registers (held
// or not), /holding only while a share is held. Here on miniredis; any
// Redis does.
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	lease, err := partition.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), partition.Options{Name: "mail-sender", Interval: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ready", health.Handler(lease, health.Registering)) // ready while registering, held or not
	mux.Handle("/holding", health.Handler(lease, health.Holding))   // 200 only while a share is held
	srv := httptest.NewServer(mux)                                  // in a worker: http.ListenAndServe(":8080", mux)
	defer srv.Close()
	status := func(path string) int {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			panic(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	fmt.Println("before Run: holding", status("/holding"))

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { _ = lease.Run(ctx) }() // or consumer.Run, which runs it
	for status("/holding") != http.StatusOK {
		time.Sleep(20 * time.Millisecond) // a new worker's first lease: two intervals
	}
	fmt.Println("running: ready", status("/ready"), "holding", status("/holding"))
	// Output:
	// before Run: holding 503
	// running: ready 200 holding 200
}
