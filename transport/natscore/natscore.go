package natscore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nandi-go/nandi/transport"
	"github.com/nats-io/nats.go"
)

// Options configure a Source.
type Options struct {
	// KeyHeader is the header holding the task id; default "id".
	KeyHeader string
	// Key, if set, returns the task id of a message instead.
	Key func(m *nats.Msg) (string, error)
	// Buffer is how many messages a subscription holds before NATS drops
	// them as a slow consumer's (default DefaultBuffer).
	Buffer int
	// Batch is the most messages one Fetch returns (default DefaultBatch).
	Batch int
	// Shards, when above 0, makes the source a subject per shard: shard s
	// is the subject SUBJECT.s (New's subject is their prefix), and a
	// producer publishes each key to SubjectFor(key), shard
	// TaskID(key) % Shards. The source is then aligned
	// (transport.Info.Aligned): a worker subscribes only to the subjects
	// its lease can own ids in, and changes its subscriptions at each
	// change of mapping. 0: one subject, every worker subscribed to it.
	Shards int
}

// Defaults of Options.
const (
	DefaultBuffer = 65536 // messages held for a slow reader before NATS drops
	DefaultBatch  = 512   // messages per Fetch
)

var _ transport.Source = (*Source)(nil)

// Source subscribes to one subject, or to a subject per shard.
type Source struct {
	nc       *nats.Conn
	subject  string
	subjects []string       // a subject per shard
	shardOf  map[string]int // and back
	opts     Options
	dropped  atomic.Int64 // by subscriptions already closed

	mu   sync.Mutex
	open map[*reader]struct{} // subscriptions open now
}

// New returns a Source for subject on nc. It does no I/O.
func New(nc *nats.Conn, subject string, opts Options) (*Source, error) {
	switch {
	case nc == nil:
		return nil, transport.Invalid("natscore: connection is nil")
	case subject == "":
		return nil, transport.Invalid("natscore: subject is empty")
	case opts.Buffer < 0:
		return nil, transport.Invalid("natscore: Buffer is %d; it must not be negative (0: %d)", opts.Buffer, DefaultBuffer)
	case opts.Batch < 0:
		return nil, transport.Invalid("natscore: Batch is %d; it must not be negative (0: %d)", opts.Batch, DefaultBatch)
	case opts.Shards < 0 || opts.Shards > 65536:
		return nil, transport.Invalid("natscore: Shards is %d; it must be 0 (one subject) to 65536", opts.Shards)
	}
	if opts.KeyHeader == "" {
		opts.KeyHeader = "id"
	}
	if opts.Buffer == 0 {
		opts.Buffer = DefaultBuffer
	}
	if opts.Batch == 0 {
		opts.Batch = DefaultBatch
	}
	s := &Source{nc: nc, subject: subject, opts: opts, subjects: []string{subject}, shardOf: map[string]int{subject: 0}}
	if opts.Shards > 0 {
		s.subjects, s.shardOf = make([]string, opts.Shards), make(map[string]int, opts.Shards)
		for i := range opts.Shards {
			s.subjects[i] = ShardSubject(subject, i)
			s.shardOf[s.subjects[i]] = i
		}
	}
	return s, nil
}

// ShardSubject is the subject of shard s of a source with prefix subject
// (Options.Shards): subject.s.
func ShardSubject(subject string, s int) string { return subject + "." + strconv.Itoa(s) }

// SubjectFor returns the subject a producer publishes key's messages to:
// its shard's (TaskID(key) % Shards) with Options.Shards, else the one.
func (s *Source) SubjectFor(key string) string {
	return s.subjects[transport.TaskID(key)%uint64(len(s.subjects))]
}

// Info reports a source that is not a log and loses what arrives while
// nobody reads; with Options.Shards, an aligned one of that many shards.
func (s *Source) Info(context.Context) (transport.Info, error) {
	return transport.Info{Shards: len(s.subjects), Lossy: true, Aligned: s.opts.Shards > 0, System: "nats", Destinations: s.subjects}, nil
}

// Dropped counts the messages NATS dropped from this source's
// subscriptions, open and closed, because they were not read fast enough
// (slow consumer): sampled from the open ones when called, so a metric
// shows the loss while it happens. It implements transport.Dropper.
func (s *Source) Dropped() int64 {
	n := s.dropped.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	for r := range s.open {
		n += r.droppedNow()
	}
	return n
}

var _ transport.Dropper = (*Source)(nil)

// Open subscribes; from is ignored. Messages are handed over by the
// subscription's callback into a buffer Fetch empties a batch at a time: no
// channel operation per message. When Buffer messages wait there, the
// callback waits, and NATS drops what comes meanwhile as a slow
// consumer's (counted by Dropped).
func (s *Source) Open(ctx context.Context, _ []transport.Position) (transport.Reader, error) {
	all := make([]int, len(s.subjects))
	for i := range all {
		all[i] = i
	}
	return s.OpenShards(ctx, nil, all)
}

var _ transport.ShardOpener = (*Source)(nil)

// OpenShards subscribes to the subjects of shards only.
func (s *Source) OpenShards(_ context.Context, _ []transport.Position, shards []int) (transport.Reader, error) {
	r := &reader{s: s, wake: make(chan struct{}, 1)}
	r.room = sync.NewCond(&r.mu)
	for _, i := range shards {
		if i < 0 || i >= len(s.subjects) {
			r.unsubscribe()
			return nil, fmt.Errorf("natscore: shard %d of a source of %d subjects", i, len(s.subjects))
		}
		sub, err := s.nc.Subscribe(s.subjects[i], r.deliver)
		if err != nil {
			r.unsubscribe()
			return nil, fmt.Errorf("natscore: subscribe %s: %w", s.subjects[i], err)
		}
		_ = sub.SetPendingLimits(s.opts.Buffer, -1)
		r.subs = append(r.subs, sub)
	}
	// The subscriptions are registered once the server has seen them.
	if err := s.nc.Flush(); err != nil {
		r.unsubscribe()
		return nil, fmt.Errorf("natscore: flush: %w", err)
	}
	s.mu.Lock()
	if s.open == nil {
		s.open = map[*reader]struct{}{}
	}
	s.open[r] = struct{}{}
	s.mu.Unlock()
	return r, nil
}

type reader struct {
	transport.Closing
	s    *Source
	subs []*nats.Subscription
	once sync.Once

	mu     sync.Mutex
	room   *sync.Cond    // the callback waits here while the buffer is full
	buf    []*nats.Msg   // delivered, not yet fetched
	spare  []*nats.Msg   // the buffer Fetch gave back, reused
	closed bool          // no more waiting in the callback
	wake   chan struct{} // capacity 1: the buffer is no longer empty
}

// deliver is the subscription's callback.
func (r *reader) deliver(m *nats.Msg) {
	r.mu.Lock()
	for len(r.buf) >= r.s.opts.Buffer && !r.closed {
		r.room.Wait()
	}
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.buf = append(r.buf, m)
	first := len(r.buf) == 1
	r.mu.Unlock()
	if first {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

func (r *reader) Fetch(ctx context.Context) ([]*transport.Message, error) {
	for {
		if err := r.Err(ctx); err != nil {
			return nil, err
		}
		r.mu.Lock()
		got := r.buf
		if len(got) > r.s.opts.Batch {
			got = got[:r.s.opts.Batch]
			r.buf = append(r.spare[:0], r.buf[r.s.opts.Batch:]...)
		} else {
			r.buf = r.spare[:0]
		}
		r.spare = nil
		if len(got) > 0 {
			r.room.Broadcast()
		}
		r.mu.Unlock()
		if len(got) > 0 {
			slab := make([]transport.Message, len(got))
			out := make([]*transport.Message, len(got))
			for i, m := range got {
				r.s.message(&slab[i], m)
				out[i] = &slab[i]
			}
			clear(got)
			r.mu.Lock()
			r.spare = got[:0]
			r.mu.Unlock()
			return out, nil
		}
		select {
		case <-r.wake:
		case <-r.Done():
			return nil, transport.ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// message fills out from m. When the message has headers other than the
// task id's, they are copied into out.Headers (first values), the task
// id's left out (it is Message.Key); otherwise Headers stays nil, which
// costs no allocation.
func (s *Source) message(out *transport.Message, m *nats.Msg) {
	*out = transport.Message{Payload: m.Data, Shard: s.shardOf[m.Subject]}
	var key string
	if vs := m.Header[s.opts.KeyHeader]; len(vs) > 0 { // NATS headers are case-sensitive
		key = vs[0]
	}
	if len(m.Header) > 1 || (len(m.Header) == 1 && key == "") {
		out.Headers = make(map[string]string, len(m.Header))
		for k, vs := range m.Header {
			if len(vs) > 0 && (k != s.opts.KeyHeader || s.opts.Key != nil) { // the task id is Message.Key, not a header
				out.Headers[k] = vs[0]
			}
		}
	}
	switch {
	case s.opts.Key != nil:
		out.Key, out.Err = s.opts.Key(m)
	case key != "":
		out.Key = key
	default:
		out.Err = fmt.Errorf("natscore: a message on %s has no header %q (its task id)", m.Subject, s.opts.KeyHeader)
	}
	if out.Err != nil {
		out.Key = transport.FallbackKey(m.Subject)
	}
}

// droppedNow is what NATS has dropped from the reader's subscriptions.
func (r *reader) droppedNow() int64 {
	var n int64
	for _, sub := range r.subs {
		if d, err := sub.Dropped(); err == nil {
			n += int64(d)
		}
	}
	return n
}

func (r *reader) unsubscribe() {
	for _, sub := range r.subs {
		_ = sub.Unsubscribe()
	}
}

func (r *reader) Close() error {
	r.once.Do(func() {
		r.s.mu.Lock()
		r.s.dropped.Add(r.droppedNow())
		delete(r.s.open, r)
		r.s.mu.Unlock()
		r.mu.Lock()
		r.closed = true
		r.room.Broadcast()
		r.mu.Unlock()
		r.unsubscribe()
	})
	return r.Closing.Close()
}
