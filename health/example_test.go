package health_test

import (
	"log"
	"net/http"

	"github.com/nandi-go/nandi/health"
	"github.com/nandi-go/nandi/partition"
	"github.com/redis/go-redis/v9"
)

func Example() {
	lease, err := partition.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"}), partition.Options{Name: "mail-sender"})
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("/ready", health.Handler(lease, health.Registering)) // ready while registering, held or not
	http.Handle("/holding", health.Handler(lease, health.Holding))   // 200 only while a share is held
	// go lease.Run(ctx) (or consumer.Run); http.ListenAndServe(":8080", nil)
}
