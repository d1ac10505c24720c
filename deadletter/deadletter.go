package deadletter

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/deadstream"
	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

// Stream is the default dead-letter stream of group: {group}:dead. A
// consumer with no Options.DeadLetter writes there (consumer.DefaultDeadLetterLimit).
func Stream(group string) string { return deadstream.Stream(group) }

// The fields of a dead letter's entry; a header h of the task is the
// field "h:" + h.
const (
	FieldKey      = deadstream.FieldKey
	FieldPayload  = deadstream.FieldPayload
	FieldError    = deadstream.FieldError
	FieldAttempts = deadstream.FieldAttempts
	FieldWorker   = deadstream.FieldWorker
	FieldIndex    = deadstream.FieldIndex
	FieldReplicas = deadstream.FieldReplicas
	FieldToken    = deadstream.FieldToken
	FieldShard    = deadstream.FieldShard
	FieldPosition = deadstream.FieldPosition
	FieldAt       = deadstream.FieldAt
	FieldSystem   = deadstream.FieldSystem
	FieldSource   = deadstream.FieldSource
	headerPrefix  = deadstream.HeaderPrefix
)

// ErrFull is wrapped by RedisStream's error when the stream holds
// Options.Limit letters: the consumer keeps the task and retries its
// letter with backoff, and nothing is lost.
var ErrFull = deadstream.ErrFull

// Letter is one dead letter.
type Letter struct {
	ID       string            `json:"id"`       // the entry's ID in the dead-letter stream
	Key      string            `json:"key"`      // the task's id, as its message carried it
	Payload  []byte            `json:"payload"`  // the message's payload (base64 in JSON)
	Headers  map[string]string `json:"headers"`  // the message's headers (a trace context among them)
	Error    string            `json:"error"`    // why the consumer gave up: the last error
	Attempts int               `json:"attempts"` // the handler's failed attempts (0: it never reached the handler)
	Worker   string            `json:"worker"`   // the worker that gave up (consumer.Consumer.Worker)
	Index    int               `json:"index"`    // the term's index,
	Replicas int               `json:"replicas"` // its replicas
	Token    int64             `json:"token"`    // and its fencing token
	System   string            `json:"system"`   // where the task came from: the source's system ("redis", "kafka", "nats"),
	Source   string            `json:"source"`   // its stream, topic or subject (empty in letters written before nandi recorded it),
	Shard    int               `json:"shard"`    // its shard
	Position string            `json:"position"` // and its position there (transport.Position.String)
	At       time.Time         `json:"at"`       // when the letter was written
}

// Options configure RedisStream.
type Options struct {
	// MaxLen caps the stream, oldest letters first (XADD MAXLEN ~); 0:
	// no cap. The letters trimmed are lost: prefer Limit.
	MaxLen int64
	// Limit refuses a letter while the stream holds that many (0: no
	// limit): RedisStream returns an error wrapping ErrFull, and the
	// consumer keeps the task and retries its letter with backoff, its id
	// waiting, until letters are replayed or deleted. Nothing is lost.
	Limit int64
}

// RedisStream returns a consumer.Options.DeadLetter that adds each dead
// task to stream on c. Its error (Redis unreachable, the stream full)
// makes the consumer retry the dead letter with backoff: the task is
// never acknowledged before its letter is written.
func RedisStream(c redis.Cmdable, stream string, opts Options) func(ctx context.Context, m *transport.Message, cause error) error {
	b := deadstream.Bounds{MaxLen: opts.MaxLen, Limit: opts.Limit}
	return func(ctx context.Context, m *transport.Message, cause error) error {
		return deadstream.Add(ctx, c, stream, m, Describe(ctx, m, cause), b)
	}
}

// Describe returns what a dead letter says of task m besides the task
// itself, as text by field name (FieldError, FieldAttempts, FieldWorker,
// FieldIndex, FieldReplicas, FieldToken, FieldSystem, FieldSource,
// FieldShard, FieldPosition, FieldAt), from cause and the DeadLetter
// call's context: the sinks of other transports carry them as headers.
func Describe(ctx context.Context, m *transport.Message, cause error) map[string]string {
	f, _ := consumer.FailureFromContext(ctx)
	a, _ := consumer.AssignmentFromContext(ctx)
	return deadstream.Facts{Cause: cause, Attempts: f.Attempts, Worker: f.Worker, Index: a.Index, Replicas: a.Replicas, Token: a.Token,
		System: f.System, Source: f.Source, Shard: m.Shard, Position: m.Position}.Map()
}

// List returns up to count letters of stream from start to end (entry
// IDs; "-" and "+" for the first and the last), oldest first.
func List(ctx context.Context, c redis.Cmdable, stream, start, end string, count int64) ([]Letter, error) {
	if count <= 0 {
		count = 100
	}
	return letters(c.XRangeN(ctx, stream, start, end, count), stream)
}

// letters decodes the entries a range read returned.
func letters(cmd *redis.XMessageSliceCmd, stream string) ([]Letter, error) {
	xs, err := cmd.Result()
	if err != nil {
		return nil, fmt.Errorf("deadletter: read %s: %w", stream, err)
	}
	out := make([]Letter, 0, len(xs))
	for _, x := range xs {
		out = append(out, letter(x))
	}
	return out, nil
}

func letter(x redis.XMessage) Letter {
	text := func(f string) string { s, _ := x.Values[f].(string); return s }
	num := func(f string) int64 { n, _ := strconv.ParseInt(text(f), 10, 64); return n }
	l := Letter{ID: x.ID, Key: text(FieldKey), Payload: []byte(text(FieldPayload)), Error: text(FieldError),
		Attempts: int(num(FieldAttempts)), Worker: text(FieldWorker), Index: int(num(FieldIndex)),
		Replicas: int(num(FieldReplicas)), Token: num(FieldToken), System: text(FieldSystem), Source: text(FieldSource), Shard: int(num(FieldShard)), Position: text(FieldPosition)}
	l.At, _ = time.Parse(time.RFC3339Nano, text(FieldAt))
	l.Headers = map[string]string{} // none: empty, never null in JSON
	for f, v := range x.Values {
		if h, ok := strings.CutPrefix(f, headerPrefix); ok {
			l.Headers[h], _ = v.(string)
		}
	}
	return l
}

// Replay publishes each letter's task through p (its key, payload and
// headers, in the order given) and deletes the letter from stream once
// its task is published. It returns how many it replayed; on an error it
// stops, and what was replayed is gone from stream, what was not is still
// there.
func Replay(ctx context.Context, c redis.Cmdable, stream string, letters []Letter, p transport.Publisher) (int, error) {
	return ReplayEach(ctx, c, stream, letters, func(Letter) (transport.Publisher, error) { return p, nil })
}

// ReplayEach is Replay with a publisher per letter: route returns the
// one a letter's task goes back through (for a Redis source, a producer
// of the stream the letter came from, Letter.Source). An error of route
// stops the replay as a failed publish does.
func ReplayEach(ctx context.Context, c redis.Cmdable, stream string, letters []Letter, route func(Letter) (transport.Publisher, error)) (int, error) {
	for i, l := range letters {
		p, err := route(l)
		if err != nil {
			return i, fmt.Errorf("deadletter: replay %s (key %q): %w", l.ID, l.Key, err)
		}
		if err := p.Publish(ctx, l.Key, l.Payload, l.Headers); err != nil {
			return i, fmt.Errorf("deadletter: replay %s (key %q): %w", l.ID, l.Key, err)
		}
		if err := c.XDel(ctx, stream, l.ID).Err(); err != nil {
			return i + 1, fmt.Errorf("deadletter: replayed %s (key %q) but could not delete it from %s (replaying it again would publish it twice): %w", l.ID, l.Key, stream, err)
		}
	}
	return len(letters), nil
}

// Delete removes letters from stream by entry ID, without replaying
// them, and returns how many were there.
func Delete(ctx context.Context, c redis.Cmdable, stream string, ids ...string) (int64, error) {
	n, err := c.XDel(ctx, stream, ids...).Result()
	if err != nil {
		return 0, fmt.Errorf("deadletter: delete from %s: %w", stream, err)
	}
	return n, nil
}

// Header is the header that carries field f of Describe on transports
// whose letters are messages (jsdead, kafkadead): "Nandi-" and f
// capitalized (Nandi-Error, Nandi-Attempts, ...).
func Header(f string) string {
	if f == "" {
		return "Nandi-"
	}
	return "Nandi-" + strings.ToUpper(f[:1]) + f[1:]
}

// Latest returns the newest n letters of stream, newest first.
func Latest(ctx context.Context, c redis.Cmdable, stream string, n int64) ([]Letter, error) {
	return letters(c.XRevRangeN(ctx, stream, "+", "-", n), stream)
}
