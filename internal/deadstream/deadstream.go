// Package deadstream writes dead letters to a Redis stream: the entry's
// fields, and the bounded add that package deadletter's RedisStream and
// the consumer's default dead letter share (the consumer cannot import
// deadletter, which builds on it).
package deadstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

// Stream is the default dead-letter stream of group: {group}:dead.
func Stream(group string) string { return partition.KeyPrefix(group) + "dead" }

// The fields of a dead letter's entry; a header h of the task is the
// field HeaderPrefix + h.
const (
	FieldKey      = "key"
	FieldPayload  = "payload"
	FieldError    = "error"
	FieldAttempts = "attempts"
	FieldWorker   = "worker"
	FieldIndex    = "index"
	FieldReplicas = "replicas"
	FieldToken    = "token"
	FieldShard    = "shard"
	FieldPosition = "position"
	FieldAt       = "at"
	FieldSystem   = "system"
	FieldSource   = "source"
	HeaderPrefix  = "h:"
)

// Facts is what a dead letter says of its task besides the task itself.
type Facts struct {
	Cause           error
	Attempts        int
	Worker          string
	Index, Replicas int
	Token           int64
	System, Source  string
	Shard           int
	Position        transport.Position
}

// Map returns the facts as text by field name.
func (f Facts) Map() map[string]string {
	msg := ""
	if f.Cause != nil {
		msg = f.Cause.Error()
	}
	return map[string]string{FieldError: msg, FieldAttempts: strconv.Itoa(f.Attempts), FieldWorker: f.Worker,
		FieldIndex: strconv.Itoa(f.Index), FieldReplicas: strconv.Itoa(f.Replicas), FieldToken: strconv.FormatInt(f.Token, 10),
		FieldSystem: f.System, FieldSource: f.Source,
		FieldShard: strconv.Itoa(f.Shard), FieldPosition: f.Position.String(), FieldAt: time.Now().UTC().Format(time.RFC3339Nano)}
}

// ErrFull says a dead-letter stream holds its limit of letters: the
// letter was not written.
var ErrFull = errors.New("the dead-letter stream is full")

// Bounds are how a stream is kept bounded: MaxLen trims the oldest letters
// past it (XADD MAXLEN ~); Limit refuses a letter while the stream holds
// that many (ErrFull), so that none is lost. Zero: none.
type Bounds struct {
	MaxLen, Limit int64
}

// Add writes m's letter, with facts, to stream.
func Add(ctx context.Context, c redis.Cmdable, stream string, m *transport.Message, facts map[string]string, b Bounds) error {
	if b.Limit > 0 {
		n, err := c.XLen(ctx, stream).Result()
		if err != nil {
			return fmt.Errorf("deadletter: count the letters of %s: %w", stream, err)
		}
		if n >= b.Limit {
			return fmt.Errorf("deadletter: %q not written: %w (%s holds %d letters, its limit %d): list, replay or delete letters (nandi dead list, replay) to make room", m.Key, ErrFull, stream, n, b.Limit)
		}
	}
	values := make([]any, 0, 4+2*len(facts)+2*len(m.Headers))
	values = append(values, FieldKey, m.Key, FieldPayload, m.Payload)
	for k, v := range facts {
		values = append(values, k, v)
	}
	for k, v := range m.Headers {
		values = append(values, HeaderPrefix+k, v)
	}
	args := &redis.XAddArgs{Stream: stream, Values: values}
	if b.MaxLen > 0 {
		args.MaxLen, args.Approx = b.MaxLen, true
	}
	if err := c.XAdd(ctx, args).Err(); err != nil {
		return fmt.Errorf("deadletter: add %q to %s: %w", m.Key, stream, err)
	}
	return nil
}
