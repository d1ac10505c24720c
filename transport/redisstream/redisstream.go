// Package redisstream is the Redis Streams transport: a drop-in consumer of
// one stream shared by a nandi group.
//
// Every worker reads the whole stream with XREAD (no consumer group, so no
// XACK and no pending entries list) from the positions the consumer's
// checkpoint ledger gives, and handles what its lease owns. Stream entry IDs
// are the positions ("ms-seq" is Position{Hi: ms, Lo: seq}), ordered exactly
// as Redis orders them; the stream is one shard.
//
// The task id comes from a field of the entry (Options.KeyField, default
// "id") or from Options.Key. An entry without it is not dropped: it goes to
// the consumer's failure policy with an error naming the entry. The payload
// is Options.PayloadField (default "payload"); every other field becomes a
// header.
//
// Reads block for at most Options.Block (default 100ms) at a time: go-redis
// does not interrupt a blocking read when its context ends, so a cancelled
// Fetch returns within that. With Options.Trim, the group trims entries that
// every index has checkpointed past (XTRIM MINID), so the stream does not
// grow forever.
package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

// Options configure a Source.
type Options struct {
	KeyField     string // the entry field holding the task id; default "id"
	PayloadField string // the entry field that becomes Message.Payload; default "payload"

	// Key, if set, returns the task id of an entry instead of KeyField.
	Key func(id string, values map[string]any) (string, error)
	// Count is the most entries one XREAD returns (default 512).
	Count int64
	// Block is the longest one XREAD blocks (default 100ms, at least 1ms).
	Block time.Duration
	// Trim lets the group trim the stream below what every index has
	// checkpointed (XTRIM MINID, exact).
	Trim bool
}

// Source reads one stream. It implements transport.Source, and
// transport.Trimmer when Options.Trim is set.
type Source struct {
	c      redis.UniversalClient
	stream string
	opts   Options
}

// New returns a Source for stream on client. It does no I/O.
func New(client redis.UniversalClient, stream string, opts Options) (*Source, error) {
	if client == nil {
		return nil, errors.New("redisstream: client is nil")
	}
	if stream == "" {
		return nil, errors.New("redisstream: stream name is empty")
	}
	if opts.KeyField == "" {
		opts.KeyField = "id"
	}
	if opts.PayloadField == "" {
		opts.PayloadField = "payload"
	}
	if opts.Count <= 0 {
		opts.Count = 512
	}
	if opts.Block == 0 {
		opts.Block = 100 * time.Millisecond
	}
	if opts.Block < time.Millisecond {
		return nil, fmt.Errorf("redisstream: Block is %v; it must be at least 1ms (XREAD BLOCK 0 waits forever)", opts.Block)
	}
	return &Source{c: client, stream: stream, opts: opts}, nil
}

// Stream returns the stream's name.
func (s *Source) Stream() string { return s.stream }

// Info reports one shard, ending after the stream's last generated ID.
func (s *Source) Info(ctx context.Context) (transport.Info, error) {
	last := "0-0"
	xi, err := s.c.XInfoStream(ctx, s.stream).Result()
	switch {
	case err == nil:
		last = xi.LastGeneratedID
	case strings.Contains(err.Error(), "no such key"):
	default:
		return transport.Info{}, fmt.Errorf("redisstream: XINFO STREAM %s: %w", s.stream, err)
	}
	p, err := parseID(last)
	if err != nil {
		return transport.Info{}, err
	}
	return transport.Info{Log: true, Shards: 1, Ends: []transport.Position{p.Next()}}, nil
}

// Open starts reading at from[0] (the stream's start without one).
func (s *Source) Open(_ context.Context, from []transport.Position) (transport.Reader, error) {
	var start transport.Position
	if len(from) > 0 {
		start = from[0]
	}
	return &reader{s: s, last: formatID(before(start))}, nil
}

// Trim removes the entries below pos (shard 0 only); a no-op unless
// Options.Trim is set.
func (s *Source) Trim(ctx context.Context, shard int, below transport.Position) error {
	if !s.opts.Trim || shard != 0 {
		return nil
	}
	if err := s.c.XTrimMinID(ctx, s.stream, formatID(below)).Err(); err != nil {
		return fmt.Errorf("redisstream: XTRIM %s MINID %s: %w", s.stream, formatID(below), err)
	}
	return nil
}

type reader struct {
	transport.Closing
	s    *Source
	last string // XREAD reads after this ID; used by Fetch only
}

func (r *reader) Fetch(ctx context.Context) ([]*transport.Message, error) {
	s := r.s
	for {
		if err := r.Err(ctx); err != nil {
			return nil, err
		}
		block := s.opts.Block
		if d, ok := ctx.Deadline(); ok {
			block = max(min(block, time.Until(d)), time.Millisecond)
		}
		res, err := s.c.XRead(ctx, &redis.XReadArgs{Streams: []string{s.stream, r.last}, Count: s.opts.Count, Block: block}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("redisstream: XREAD %s: %w", s.stream, err)
		}
		var out []*transport.Message
		for _, st := range res {
			for _, x := range st.Messages {
				m, err := s.message(x)
				if err != nil {
					return nil, err
				}
				out = append(out, m)
			}
		}
		if len(out) == 0 {
			continue
		}
		r.last = formatID(out[len(out)-1].Position)
		return out, nil
	}
}

func (s *Source) message(x redis.XMessage) (*transport.Message, error) {
	p, err := parseID(x.ID)
	if err != nil {
		return nil, err
	}
	m := &transport.Message{Position: p}
	if s.opts.Key != nil {
		m.Key, m.Err = s.opts.Key(x.ID, x.Values)
	} else if v, ok := x.Values[s.opts.KeyField]; ok {
		m.Key = fmt.Sprint(v)
	} else {
		m.Err = fmt.Errorf("redisstream: entry %s of stream %s has no field %q (its task id)", x.ID, s.stream, s.opts.KeyField)
	}
	if m.Err != nil {
		m.Key = x.ID // spreads such entries over the group; the owner reports it
	}
	for f, v := range x.Values {
		switch f {
		case s.opts.PayloadField:
			m.Payload = []byte(fmt.Sprint(v))
		case s.opts.KeyField:
		default:
			if m.Headers == nil {
				m.Headers = map[string]string{}
			}
			m.Headers[f] = fmt.Sprint(v)
		}
	}
	return m, nil
}

func parseID(id string) (transport.Position, error) {
	p, err := transport.ParsePosition(id)
	if err != nil {
		return p, fmt.Errorf("redisstream: entry ID %q: %w", id, err)
	}
	return p, nil
}

func formatID(p transport.Position) string { return fmt.Sprintf("%d-%d", p.Hi, p.Lo) }

// before returns the ID just before p, for XREAD's exclusive start.
func before(p transport.Position) transport.Position {
	switch {
	case p.Lo > 0:
		return transport.Position{Hi: p.Hi, Lo: p.Lo - 1}
	case p.Hi > 0:
		return transport.Position{Hi: p.Hi - 1, Lo: ^uint64(0)}
	}
	return p
}
