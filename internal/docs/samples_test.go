package docs

// The guide's Go samples that are not Examples of their packages: each
// function holds one, as the page shows it (TestGoSamplesAreFromCompiledFiles
// finds it here), so that it compiles with the code it uses.

import (
	"context"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/tracing"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/redis/go-redis/v9"
)

// docs/concepts.md: the lease on its own.
func sampleLease(ctx context.Context) error {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"}) // or Sentinel, or Cluster
	lease, err := partition.New(client, partition.Options{Name: "mail-sender", Interval: 5 * time.Second})
	if err != nil {
		return err // errors.Is(err, partition.ErrInvalidOptions), and says which field
	}

	go lease.Run(ctx) // registers once per interval until ctx ends

	for {
		term, err := lease.Next(ctx) // waits, without polling, until a share is held
		if err != nil {
			return err
		}
		a := term.Assignment() // Index, Replicas, Token (a fencing token)
		log.Printf("holding %d of %d, token %d", a.Index, a.Replicas, a.Token)
		// take tasks with a.Owns(id) until term.Done(); term.Err() says why it ended:
		// ErrMappingChanged, ErrExpired, ErrGenerationChanged, ErrStopped.
		// term.Deadline() is when it runs out unless renewed; term.Deadlines() tells each renewal, term.Room(ctx, d) waits until d is left.
		<-term.Done()
	}
}

// mailer stands for the application's mail client.
var mailer interface {
	Send(ctx context.Context, payload []byte) error
}

// docs/handlers.md: a consumer of a Redis stream.
func sampleConsumer() error {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"}) // or NewFailoverClient (Sentinel), NewClusterClient
	lease, err := partition.New(client, partition.Options{Name: "mail-sender"})
	if err != nil {
		return err
	}
	// The outbox: a Redis stream whose entries carry the task id in "id" and
	// the mail in "payload" (any transport below fits here).
	source, err := redisstream.New(client, "outbox", redisstream.Options{Trim: true})
	if err != nil {
		return err
	}
	send := func(ctx context.Context, m *transport.Message) error {
		// m.Key is the task id (decimal, or any string: hashed with FNV-1a 64);
		// ctx ends when the lease runs out: pass it on, and return when it ends.
		// Return nil once the server has accepted the mail, whatever happens
		// after (the effect boundary, below).
		return mailer.Send(ctx, m.Payload)
	}
	c, err := consumer.New(lease, source, send, consumer.Options{Concurrency: 16})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return c.Run(ctx) // runs the lease; on SIGTERM: stop taking, drain, write checkpoints, leave
}

// smtpConn stands for an SMTP client (net/smtp's, go-smtp's).
type smtpConn interface {
	Mail(from string) error
	Rcpt(to string) error
	Data() (io.WriteCloser, error)
	Quit() error
	Close() error
}

var (
	smtpDial func(ctx context.Context, addr string) (smtpConn, error)
	to       func(m *transport.Message) string
	addr     string
	from     string
)

// docs/handlers.md: where the effect ends.
func sampleEffectBoundary() consumer.Handler {
	send := func(ctx context.Context, m *transport.Message) error {
		c, err := smtpDial(ctx, addr)
		if err != nil {
			return err // nothing sent: retried
		}
		defer c.Close()
		if err := c.Mail(from); err != nil {
			return err
		}
		if err := c.Rcpt(to(m)); err != nil {
			return err
		}
		w, err := c.Data()
		if err != nil {
			return err
		}
		if _, err := w.Write(m.Payload); err != nil {
			return err
		}
		if err := w.Close(); err != nil {
			return err // the server's reply to DATA
		}
		// ---- effect boundary: the mail is sent ----
		_ = c.Quit() // cleanup: its error is not a failure
		return nil
	}
	return send
}

var rdb redis.UniversalClient

// docs/handlers.md: fencing with the term's token.
func sampleFencing() consumer.Handler {
	var fencedSet = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) < cur then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1`)

	send := func(ctx context.Context, m *transport.Message) error {
		a, _ := consumer.AssignmentFromContext(ctx) // the term this task runs under
		ok, err := fencedSet.Run(ctx, rdb, []string{"{mail-sender}:claims"}, m.Key, a.Token).Bool()
		if err != nil || !ok {
			return err // refused: a newer holder has this task
		}
		return mailer.Send(ctx, m.Payload)
	}
	return send
}

// docs/observability.md: a traced handler.
func sampleTracing(send consumer.Handler) consumer.Handler {
	send = tracing.Handler(send, tracing.Options{}) // otel's global TracerProvider and propagator unless set
	// the producer: tracing.Inject(ctx, headers, tracing.Options{}) before publishing
	return send
}

// The samples are compiled, never run: they need servers the guide's
// readers have. Naming them here keeps them in the build.
var _ = []any{sampleLease, sampleConsumer, sampleEffectBoundary, sampleFencing, sampleTracing}
