package transport

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Message is one task as a source delivers it.
type Message struct {
	// Key is the task's id as text: a decimal uint64, or any string, which
	// the consumer hashes (see consumer.ID).
	Key     string
	Payload []byte
	Headers map[string]string

	// Shard and Position place the message in a log; zero for sources that
	// are not logs (Info.Log false).
	Shard    int
	Position Position

	// Ack, when set, tells the source that the worker is done with the
	// message: handled, not its to handle, or given up (read while holding
	// nothing, or its lease ended first; a source that is not a log does
	// not deliver it again, since every worker has its own copy). Sources
	// that need no acknowledgement (logs read from positions, NATS core)
	// leave it nil.
	Ack func()

	// Err, when set, says the source could not make a proper task of the
	// message (a stream entry without its id field, say) and why, naming
	// it. A consumer sends such a message to its failure policy with this
	// error instead of to the handler: it is never dropped silently.
	Err error
}

// Position is a place in one shard of a log. Positions compare by Hi, then
// Lo. A Redis stream entry ID "ms-seq" is {Hi: ms, Lo: seq}; a single
// offset n (Kafka, JetStream, memory) is {Lo: n}.
type Position struct {
	Hi, Lo uint64
}

// Offset returns the Position of a single-number offset.
func Offset(n uint64) Position { return Position{Lo: n} }

// Compare returns -1, 0 or +1 as p is before, equal to or after q.
func (p Position) Compare(q Position) int {
	switch {
	case p.Hi < q.Hi:
		return -1
	case p.Hi > q.Hi:
		return 1
	case p.Lo < q.Lo:
		return -1
	case p.Lo > q.Lo:
		return 1
	}
	return 0
}

// Less reports whether p is before q.
func (p Position) Less(q Position) bool { return p.Compare(q) < 0 }

// Next returns the smallest Position after p. The largest Position (a
// Redis stream entry ID of 2^64-1-2^64-1, after which XADD refuses
// everything) has none: Next returns it unchanged rather than wrap around
// to the start of the log.
func (p Position) Next() Position {
	if p.Lo == ^uint64(0) {
		if p.Hi == ^uint64(0) {
			return p
		}
		return Position{Hi: p.Hi + 1}
	}
	return Position{Hi: p.Hi, Lo: p.Lo + 1}
}

// String formats p as "lo" when Hi is zero, else as "hi-lo" (a Redis
// stream entry ID).
func (p Position) String() string {
	if p.Hi == 0 {
		return strconv.FormatUint(p.Lo, 10)
	}
	return strconv.FormatUint(p.Hi, 10) + "-" + strconv.FormatUint(p.Lo, 10)
}

// ParsePosition parses what String returns.
func ParsePosition(s string) (Position, error) {
	hi, lo, two := strings.Cut(s, "-")
	if !two {
		lo, hi = hi, "0"
	}
	h, err1 := strconv.ParseUint(hi, 10, 64)
	l, err2 := strconv.ParseUint(lo, 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return Position{}, fmt.Errorf("transport: position %q is not \"n\" or \"hi-lo\" in decimal: %w", s, err)
	}
	return Position{Hi: h, Lo: l}, nil
}

// Info describes a source: what it is and what it can do.
type Info struct {
	// Log is true when messages carry Shard and Position and Open reads
	// each shard from the position it is given.
	Log bool
	// Shards is the number of shards of a log, numbered 0..Shards-1; 1 for
	// a source that is not a log.
	Shards int
	// Ends is, for a log, the position the next message of each shard will
	// have: where a group that starts at the end of the log begins.
	Ends []Position
	// Lossy is true when messages that arrive while no Reader is open, or
	// faster than the Reader is fetched, are lost (NATS core).
	Lossy bool
	// Aligned is true when shard s (of Shards) holds only tasks whose id
	// has TaskID(key) % Shards == s: the producers placed each key by its
	// task id (redisstream.Shard, kafkatopic.Balancer, the subject helpers
	// of natsjs and natscore, memory.NewAlignedLog). A consumer then reads
	// only the shards its lease can own ids in
	// (partition.Assignment.ShardsOf), through ShardOpener.
	Aligned bool

	// System names the messaging system in OpenTelemetry's terms
	// (messaging.system): "redis", "kafka", "nats", "watermill", "memory".
	System string
	// Destinations names what the source reads (messaging.destination.name):
	// one name per shard (the streams of a sharded Redis source, the
	// subjects of a sharded NATS core source), or one for every shard (a
	// Kafka topic, a JetStream stream). Empty when there is no name.
	Destinations []string
	// Subjects, for a NATS source, are the subjects it reads: one per
	// shard (a sharded source), or the filter of its only shard. Empty
	// elsewhere.
	Subjects []string
}

// Destination returns the name of shard's destination (see Destinations):
// its own, else the one of every shard, else "".
func (i Info) Destination(shard int) string {
	switch {
	case shard >= 0 && shard < len(i.Destinations):
		return i.Destinations[shard]
	case len(i.Destinations) > 0:
		return i.Destinations[0]
	}
	return ""
}

// ShardOpener is implemented by sources that can read some of their shards
// only; every source that can report Info.Aligned does.
type ShardOpener interface {
	// OpenShards is Open for the shards listed (ascending, each below
	// Info.Shards): shard s is read from from[s] (from its start when from
	// is shorter), and no other shard is read. A source that is not a log
	// ignores from.
	OpenShards(ctx context.Context, from []Position, shards []int) (Reader, error)
}

// Source is where a consumer's tasks come from.
type Source interface {
	// Info describes the source as it is now (a log's shards and ends).
	Info(ctx context.Context) (Info, error)
	// Open starts reading. For a log, from[s] is where shard s is read
	// from (a shard beyond len(from) is read from its start); other
	// sources ignore from.
	Open(ctx context.Context, from []Position) (Reader, error)
}

// Reader reads the messages of one Open.
type Reader interface {
	// Fetch returns at least one message, blocking until one is available
	// or ctx ends (then it returns ctx's error promptly). Within a shard,
	// messages come in position order. A Fetch that returns an error has
	// consumed nothing: the next Fetch delivers what it would have.
	Fetch(ctx context.Context) ([]*Message, error)
	// Close stops reading and releases what Open took. It is safe to call
	// more than once, and concurrently with Fetch (which then returns
	// ErrClosed).
	Close() error
}

// Trimmer is implemented by logs that can drop what a group has finished.
// A consumer calls Trim with a position below which every index has
// checkpointed.
type Trimmer interface {
	Trim(ctx context.Context, shard int, below Position) error
}

// Counter is implemented by logs that can count a shard's messages from a
// position on without reading them: a group's lag in entries, what an
// autoscaler scales on (nandi scaler). Every log transport implements it.
type Counter interface {
	// Backlog returns, for each shard, how many messages the log holds at
	// or after from[s] (all of the shard's when from is shorter or from[s]
	// is zero): exact, and as cheap as the log allows (a Redis stream's
	// counters, a Kafka partition's end offset, a JetStream consumer's
	// pending count), never a read of the messages themselves on each
	// call.
	Backlog(ctx context.Context, from []Position) ([]int64, error)
}

// Rereader is implemented by logs that can read entries again by
// position. A consumer holds the tasks waiting behind an id whose first
// task keeps failing as their positions only (a few dozen bytes each,
// whatever their payload) and reads them again with Reread when their
// turn comes, so that a failing id costs memory by its count of waiting
// tasks, never by their size, and never holds up other ids.
type Rereader interface {
	// Reread returns the messages at positions at of shard (ascending), one
	// per position, in that order, as Fetch would have delivered them. A
	// position the log no longer has (trimmed, deleted) comes back as a
	// Message with Shard, Position and a FallbackKey set and Err saying
	// so: it is never left out. An error means nothing was read.
	Reread(ctx context.Context, shard int, at []Position) ([]*Message, error)
}

// Gone returns the message Reread answers for a position the log no longer
// has, for transports.
func Gone(shard int, p Position, where string) *Message {
	return &Message{Shard: shard, Position: p, Key: FallbackKey(where),
		Err: fmt.Errorf("transport: %s is gone from the log (trimmed or deleted) before its task was handled", where)}
}

// Dropper is implemented by sources that can lose messages before a
// consumer reads them (NATS core drops what a slow subscriber does not read
// in time); Dropped counts them. Package metrics exports it.
type Dropper interface {
	Dropped() int64
}

// ErrClosed is returned by Fetch on a closed Reader.
var ErrClosed = errors.New("transport: reader closed")

// ErrInvalidOptions is wrapped by every error a transport's constructor
// returns for options it cannot run with; the message says which and what
// to do. Every transport refuses a bad value rather than replace it.
var ErrInvalidOptions = errors.New("transport: invalid options")

// Invalid returns an error wrapping ErrInvalidOptions, for transports.
func Invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...)
}

// FallbackKey is the key of a message that has no task id (its id field,
// header or key is missing): the message's place in its source, so that
// such messages spread over the group, and the owner reports it with the
// message's Err. On an aligned source (Info.Aligned) the consumer gives
// such a message to the index that reads its shard instead, since no id
// placed it there. Every transport uses it.
func FallbackKey(place string) string { return "no-id:" + place }

// Closing is the closed state of a Reader, for transports to embed: the
// zero value is open, Close closes it once, and Err tells a Fetch whether
// to stop.
type Closing struct {
	mu sync.Mutex
	ch chan struct{}
}

// Done is closed once Close has been called.
func (c *Closing) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.channel()
}

func (c *Closing) channel() chan struct{} {
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

// Close closes; it may be called more than once.
func (c *Closing) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.channel()
	select {
	case <-ch:
	default:
		close(ch)
	}
	return nil
}

// Err returns ErrClosed once closed, else ctx's error.
func (c *Closing) Err(ctx context.Context) error {
	select {
	case <-c.Done():
		return ErrClosed
	default:
		return ctx.Err()
	}
}
