package memory

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/nandi-go/nandi/transport"
)

// Log is an in-memory log of shards, which can grow (Grow). Its methods
// are safe for concurrent use.
type Log struct {
	mu      sync.Mutex
	shards  [][]entry
	grew    chan struct{} // closed and replaced at every Append
	aligned bool          // a key goes to shard TaskID(key) % shards
}

type entry struct {
	key     string
	payload []byte
	headers map[string]string
}

// NewLog returns an empty log with the given number of shards (at least 1).
func NewLog(shards int) *Log {
	if shards < 1 {
		panic("memory.NewLog: shards must be at least 1")
	}
	return &Log{shards: make([][]entry, shards), grew: make(chan struct{})}
}

// NewAlignedLog returns an empty log whose shards are aligned with task
// ids: a key goes to shard transport.TaskID(key) % shards, and its source
// says so (Info.Aligned), so that each worker of a group reads only the
// shards its lease can own ids in.
func NewAlignedLog(shards int) *Log {
	l := NewLog(shards)
	l.aligned = true
	return l
}

// ShardOf returns the shard Append puts key in.
func (l *Log) ShardOf(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.shardOf(key)
}

func (l *Log) shardOf(key string) int {
	if l.aligned {
		return int(transport.TaskID(key) % uint64(len(l.shards)))
	}
	return int(transport.KeyHash(key) % uint64(len(l.shards)))
}

// Append adds a message and returns where it went.
func (l *Log) Append(key string, payload []byte) (shard int, pos uint64) {
	return l.AppendWithHeaders(key, payload, nil)
}

// AppendWithHeaders adds a message with headers (a trace context, say):
// copied, and shared by every reader as the payload is.
func (l *Log) AppendWithHeaders(key string, payload []byte, headers map[string]string) (shard int, pos uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.appendTo(l.shardOf(key), key, payload, headers)
}

// AppendTo adds a message to shard whatever its key: a producer that
// places keys its own way (or by an older shard count), for tests of
// aligned logs that are not.
func (l *Log) AppendTo(shard int, key string, payload []byte) (pos uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, pos = l.appendTo(shard, key, payload, nil)
	return pos
}

// Grow gives the log shards shards (no fewer than it has): an aligned
// log places keys by the new count from now on, as producers switched to
// it would; readers open before read the shards they were given.
func (l *Log) Grow(shards int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.shards) < shards {
		l.shards = append(l.shards, nil)
	}
}

func (l *Log) appendTo(shard int, key string, payload []byte, headers map[string]string) (int, uint64) {
	pos := uint64(len(l.shards[shard]))
	var hs map[string]string
	if len(headers) > 0 {
		hs = maps.Clone(headers)
	}
	l.shards[shard] = append(l.shards[shard], entry{key: key, payload: bytes.Clone(payload), headers: hs})
	close(l.grew)
	l.grew = make(chan struct{})
	return shard, pos
}

// Len returns the number of messages in shard s.
func (l *Log) Len(s int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.shards[s])
}

// Source returns a new source over the log; every reader it opens sees
// every message.
func (l *Log) Source() transport.Source { return &source{l: l} }

type source struct{ l *Log }

func (s *source) Info(context.Context) (transport.Info, error) {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	ends := make([]transport.Position, len(s.l.shards))
	for i, sh := range s.l.shards {
		ends[i] = transport.Offset(uint64(len(sh)))
	}
	return transport.Info{Log: true, Shards: len(s.l.shards), Ends: ends, Aligned: s.l.aligned, System: "memory", Destinations: []string{"memory"}}, nil
}

var _ transport.Counter = (*source)(nil)

// Backlog counts each shard's messages at or after from[s].
func (s *source) Backlog(_ context.Context, from []transport.Position) ([]int64, error) {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	out := make([]int64, len(s.l.shards))
	for i, sh := range s.l.shards {
		var start uint64
		if i < len(from) {
			start = from[i].Lo
		}
		out[i] = max(int64(len(sh))-int64(start), 0)
	}
	return out, nil
}

// maxBatch bounds one Fetch.
const maxBatch = 256

func (s *source) Open(ctx context.Context, from []transport.Position) (transport.Reader, error) {
	s.l.mu.Lock()
	all := make([]int, len(s.l.shards))
	s.l.mu.Unlock()
	for i := range all {
		all[i] = i
	}
	return s.OpenShards(ctx, from, all)
}

var _ transport.ShardOpener = (*source)(nil)

// OpenShards reads the shards listed only.
func (s *source) OpenShards(_ context.Context, from []transport.Position, shards []int) (transport.Reader, error) {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	next := make([]uint64, len(s.l.shards))
	for i := range next {
		if i < len(from) {
			next[i] = from[i].Lo
		}
	}
	for _, sh := range shards {
		if sh < 0 || sh >= len(s.l.shards) {
			return nil, fmt.Errorf("memory: shard %d of a log of %d", sh, len(s.l.shards))
		}
	}
	return &reader{l: s.l, next: next, read: append([]int(nil), shards...)}, nil
}

var _ transport.Rereader = (*source)(nil)

// Reread returns the messages at positions at of shard.
func (s *source) Reread(_ context.Context, shard int, at []transport.Position) ([]*transport.Message, error) {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if shard < 0 || shard >= len(s.l.shards) {
		return nil, fmt.Errorf("memory: shard %d of a log of %d", shard, len(s.l.shards))
	}
	sh := s.l.shards[shard]
	out := make([]*transport.Message, len(at))
	for i, p := range at {
		if p.Hi != 0 || p.Lo >= uint64(len(sh)) {
			out[i] = transport.Gone(shard, p, fmt.Sprintf("entry %d/%v", shard, p))
			continue
		}
		e := sh[p.Lo]
		out[i] = &transport.Message{Key: e.key, Payload: e.payload, Headers: e.headers, Shard: shard, Position: p}
	}
	return out, nil
}

type reader struct {
	transport.Closing
	l    *Log
	next []uint64 // per shard; used by Fetch only
	read []int    // the shards read
	turn int
}

func (r *reader) Fetch(ctx context.Context) ([]*transport.Message, error) {
	for {
		if err := r.Err(ctx); err != nil {
			return nil, err
		}
		r.l.mu.Lock()
		// Take from the shards in turn so none starves. The messages of a
		// batch share one allocation.
		avail := 0
		for _, s := range r.read {
			avail += len(r.l.shards[s]) - int(r.next[s])
		}
		var out []*transport.Message
		if avail > 0 {
			k := min(avail, maxBatch)
			slab := make([]transport.Message, k)
			out = make([]*transport.Message, 0, k)
			n := len(r.read)
			for j := 0; j < n && len(out) < maxBatch; j++ {
				s := r.read[(r.turn+j)%n]
				sh := r.l.shards[s]
				for r.next[s] < uint64(len(sh)) && len(out) < maxBatch {
					e := sh[r.next[s]]
					m := &slab[len(out)]
					*m = transport.Message{Key: e.key, Payload: e.payload, Headers: e.headers, Shard: s, Position: transport.Offset(r.next[s])}
					out = append(out, m)
					r.next[s]++
				}
			}
		}
		r.turn = (r.turn + 1) % max(len(r.read), 1)
		grew := r.l.grew
		r.l.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		select {
		case <-grew:
		case <-r.Done():
		case <-ctx.Done():
		}
	}
}

var _ transport.Publisher = (*Log)(nil)

// Publish appends a task (AppendWithHeaders): the Log as a
// transport.Publisher, for tests of producers. It refuses an empty key
// with transport.ErrInvalidTask, as every Publisher does.
func (l *Log) Publish(_ context.Context, key string, payload []byte, headers map[string]string) error {
	if key == "" {
		return transport.InvalidTask("memory: an empty key: every task needs the key its id comes from")
	}
	l.AppendWithHeaders(key, payload, headers)
	return nil
}
