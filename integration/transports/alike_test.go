package transports_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/nandi-go/nandi/transport/natscore"
	"github.com/nandi-go/nandi/transport/natsjs"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nandi-go/nandi/transport/watermillsub"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
)

// Every transport's constructor refuses bad options with an error that
// wraps transport.ErrInvalidOptions, and none replaces a negative value
// with its default.
func TestConstructorsRefuseBadOptionsAlike(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rc.Close()
	nc := &nats.Conn{} // never used: the constructors do no I/O
	js, _ := jetstream.New(nc)
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer ps.Close()
	for name, mk := range map[string]func() error{
		"redisstream nil client": func() error { _, err := redisstream.New(nil, "s", redisstream.Options{}); return err },
		"redisstream no stream":  func() error { _, err := redisstream.New(rc, "", redisstream.Options{}); return err },
		"redisstream Count -1":   func() error { _, err := redisstream.New(rc, "s", redisstream.Options{Count: -1}); return err },
		"redisstream Block 1µs": func() error {
			_, err := redisstream.New(rc, "s", redisstream.Options{Block: time.Microsecond})
			return err
		},
		"redisstream twice": func() error {
			_, err := redisstream.NewSharded(rc, []string{"a", "a"}, redisstream.Options{})
			return err
		},
		"natscore nil conn":    func() error { _, err := natscore.New(nil, "s", natscore.Options{}); return err },
		"natscore no subject":  func() error { _, err := natscore.New(nc, "", natscore.Options{}); return err },
		"natscore Buffer -1":   func() error { _, err := natscore.New(nc, "s", natscore.Options{Buffer: -1}); return err },
		"natscore Batch -1":    func() error { _, err := natscore.New(nc, "s", natscore.Options{Batch: -1}); return err },
		"natsjs nil":           func() error { _, err := natsjs.New(nil, "S", natsjs.Options{}); return err },
		"natsjs no stream":     func() error { _, err := natsjs.New(js, "", natsjs.Options{}); return err },
		"natsjs Batch -1":      func() error { _, err := natsjs.New(js, "S", natsjs.Options{Batch: -1}); return err },
		"kafkatopic no broker": func() error { _, err := kafkatopic.New(nil, "t", kafkatopic.Options{}); return err },
		"kafkatopic no topic":  func() error { _, err := kafkatopic.New([]string{"x:1"}, "", kafkatopic.Options{}); return err },
		"kafkatopic Buffer -1": func() error {
			_, err := kafkatopic.New([]string{"x:1"}, "t", kafkatopic.Options{Buffer: -1})
			return err
		},
		"kafkatopic MaxWait -1": func() error {
			_, err := kafkatopic.New([]string{"x:1"}, "t", kafkatopic.Options{MaxWait: -1})
			return err
		},
		"kafkatopic GroupID": func() error {
			_, err := kafkatopic.New([]string{"x:1"}, "t", kafkatopic.Options{Reader: kafka.ReaderConfig{GroupID: "g"}})
			return err
		},
		"watermillsub nil":      func() error { _, err := watermillsub.New(nil, "t", watermillsub.Options{}); return err },
		"watermillsub no topic": func() error { _, err := watermillsub.New(ps, "", watermillsub.Options{}); return err },
	} {
		if err := mk(); !errors.Is(err, transport.ErrInvalidOptions) {
			t.Errorf("%s: %v; want an error wrapping transport.ErrInvalidOptions", name, err)
		}
	}
}
