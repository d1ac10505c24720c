package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nandi-go/nandi/transport"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options configure a Source.
type Options struct {
	// KeyHeader is the header holding the task id; default "id".
	KeyHeader string
	// Key, if set, returns the task id of a message instead.
	Key func(m jetstream.Msg) (string, error)
	// Subjects filters the stream (default: all of it).
	Subjects []string
	// Batch is the most messages one Fetch returns (default DefaultBatch).
	Batch int
	// Shards and SubjectPrefix, when Shards is above 0, make each subject
	// PREFIX.s of the stream a shard: a producer publishes each key to
	// SubjectFor(key), shard TaskID(key) % Shards, and the source is
	// aligned (transport.Info.Aligned): a worker's ordered consumer filters
	// on the subjects its lease can own ids in only (FilterSubjects,
	// nats-server 2.10 or later). A shard's positions are the stream
	// sequences of its subject's messages. Subjects is then unused.
	Shards        int
	SubjectPrefix string
}

// Defaults of Options.
const (
	DefaultBatch  = 512             // messages per Fetch
	DeleteTimeout = 2 * time.Second // bound of deleting the ordered consumer at Close
)

var _ transport.Source = (*Source)(nil)

// Source reads one stream.
type Source struct {
	js       jetstream.JetStream
	stream   string
	opts     Options
	subjects []string       // a subject per shard, with Options.Shards
	shardOf  map[string]int // and back
}

// New returns a Source for stream. It does no I/O.
func New(js jetstream.JetStream, stream string, opts Options) (*Source, error) {
	switch {
	case js == nil:
		return nil, transport.Invalid("natsjs: JetStream is nil")
	case stream == "":
		return nil, transport.Invalid("natsjs: stream name is empty")
	case opts.Batch < 0:
		return nil, transport.Invalid("natsjs: Batch is %d; it must not be negative (0: %d)", opts.Batch, DefaultBatch)
	case opts.Shards < 0 || opts.Shards > 65536:
		return nil, transport.Invalid("natsjs: Shards is %d; it must be 0 (one shard) to 65536", opts.Shards)
	case opts.Shards > 0 && opts.SubjectPrefix == "":
		return nil, transport.Invalid("natsjs: Shards is %d but SubjectPrefix is empty: shard s is the subject PREFIX.s", opts.Shards)
	}
	if opts.KeyHeader == "" {
		opts.KeyHeader = "id"
	}
	if opts.Batch == 0 {
		opts.Batch = DefaultBatch
	}
	s := &Source{js: js, stream: stream, opts: opts}
	if opts.Shards > 0 {
		s.subjects, s.shardOf = make([]string, opts.Shards), make(map[string]int, opts.Shards)
		for i := range opts.Shards {
			s.subjects[i] = ShardSubject(opts.SubjectPrefix, i)
			s.shardOf[s.subjects[i]] = i
		}
	}
	return s, nil
}

// ShardSubject is the subject of shard s under prefix: prefix.s.
func ShardSubject(prefix string, s int) string { return prefix + "." + strconv.Itoa(s) }

// SubjectFor returns the subject a producer publishes key's messages to
// with Options.Shards: its shard's, TaskID(key) % Shards. Without it, it
// returns SubjectPrefix.
func (s *Source) SubjectFor(key string) string {
	if len(s.subjects) == 0 {
		return s.opts.SubjectPrefix
	}
	return s.subjects[transport.TaskID(key)%uint64(len(s.subjects))]
}

// Info reports one shard ending after the stream's last sequence; with
// Options.Shards, a shard per subject, each ending after its last
// message's sequence (0 when it has none), aligned.
func (s *Source) Info(ctx context.Context) (transport.Info, error) {
	st, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return transport.Info{}, fmt.Errorf("natsjs: stream %s: %w", s.stream, err)
	}
	if len(s.subjects) == 0 {
		in, err := st.Info(ctx)
		if err != nil {
			return transport.Info{}, fmt.Errorf("natsjs: stream %s info: %w", s.stream, err)
		}
		return transport.Info{Log: true, Shards: 1, Ends: []transport.Position{transport.Offset(in.State.LastSeq + 1)}, System: "nats", Destinations: []string{s.stream}, Subjects: s.opts.Subjects}, nil
	}
	ends := make([]transport.Position, len(s.subjects))
	for i, subj := range s.subjects {
		m, err := st.GetLastMsgForSubject(ctx, subj)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return transport.Info{}, fmt.Errorf("natsjs: last message of %s in %s: %w", subj, s.stream, err)
		default:
			ends[i] = transport.Offset(m.Sequence + 1)
		}
	}
	return transport.Info{Log: true, Shards: len(s.subjects), Ends: ends, Aligned: true, System: "nats", Destinations: []string{s.stream}, Subjects: s.subjects}, nil
}

var _ transport.ShardOpener = (*Source)(nil)

// Open starts an ordered consumer at sequence from[0] (the stream's start
// without one); with Options.Shards, at the lowest from of every subject.
func (s *Source) Open(ctx context.Context, from []transport.Position) (transport.Reader, error) {
	n := max(len(s.subjects), 1)
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	return s.OpenShards(ctx, from, all)
}

// OpenShards starts an ordered consumer on the subjects of shards only
// (FilterSubjects), at the lowest of their positions; what it delivers of
// a shard below that shard's position is skipped.
func (s *Source) OpenShards(ctx context.Context, from []transport.Position, shards []int) (transport.Reader, error) {
	r := &reader{s: s, from: make([]uint64, max(len(s.subjects), 1))}
	start := ^uint64(0)
	filter := s.opts.Subjects
	if len(s.subjects) > 0 {
		filter = nil
	}
	for _, i := range shards {
		if i < 0 || i >= len(r.from) {
			return nil, fmt.Errorf("natsjs: shard %d of a source of %d", i, len(r.from))
		}
		if i < len(from) {
			r.from[i] = from[i].Lo
		}
		start = min(start, r.from[i])
		if len(s.subjects) > 0 {
			filter = append(filter, s.subjects[i])
		}
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filter, DeliverPolicy: jetstream.DeliverAllPolicy}
	if start != ^uint64(0) && start > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
	}
	cons, err := s.js.OrderedConsumer(ctx, s.stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("natsjs: ordered consumer on %s: %w", s.stream, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("natsjs: messages of %s: %w", s.stream, err)
	}
	r.cons, r.it = cons, it
	return r, nil
}

type reader struct {
	transport.Closing
	s    *Source
	cons jetstream.Consumer
	it   jetstream.MessagesContext
	from []uint64 // per shard: what is delivered below it is skipped
	once sync.Once
}

// Fetch waits for one message, then takes what else is already there.
// Iterator calls that end with the context leave their message in the
// iterator: nothing is consumed.
func (r *reader) Fetch(ctx context.Context) ([]*transport.Message, error) {
	for {
		out, err := r.fetch(ctx)
		if err != nil || len(out) > 0 {
			return out, err
		}
		// Everything read was below its shard's position: read on.
	}
}

// fetch waits for one message, then takes what else is already there,
// leaving out what lies below its shard's position (an ordered consumer
// over several subjects starts at the lowest of them).
func (r *reader) fetch(ctx context.Context) ([]*transport.Message, error) {
	if err := r.Err(ctx); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	go func() {
		select {
		case <-r.Done():
			cancel()
		case <-cctx.Done():
		}
	}()
	m, err := r.it.Next(jetstream.NextContext(cctx))
	if err != nil {
		if e := r.Err(ctx); e != nil {
			return nil, e
		}
		return nil, fmt.Errorf("natsjs: next message of %s: %w", r.s.stream, err)
	}
	var out []*transport.Message
	take := func(m jetstream.Msg) {
		if x := r.s.message(m); x.Position.Lo >= r.from[x.Shard] {
			out = append(out, x)
		}
	}
	take(m)
	for len(out) < r.s.opts.Batch {
		m, err := r.it.Next(jetstream.NextMaxWait(time.Millisecond))
		if err != nil {
			break
		}
		take(m)
	}
	return out, nil
}

func (s *Source) message(m jetstream.Msg) *transport.Message {
	out := &transport.Message{Payload: m.Data()}
	var seq uint64
	if md, err := m.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	out.Position = transport.Offset(seq)
	if len(s.subjects) > 0 {
		out.Shard = s.shardOf[m.Subject()]
	}
	h := m.Headers()
	for k := range h {
		if k == s.opts.KeyHeader && s.opts.Key == nil {
			continue // the task id is Message.Key, not a header (the rule of every transport)
		}
		if out.Headers == nil {
			out.Headers = make(map[string]string, len(h))
		}
		out.Headers[k] = h.Get(k)
	}
	switch {
	case s.opts.Key != nil:
		out.Key, out.Err = s.opts.Key(m)
	case nats.Header(h).Get(s.opts.KeyHeader) != "":
		out.Key = h.Get(s.opts.KeyHeader)
	default:
		out.Err = fmt.Errorf("natsjs: message %d of stream %s has no header %q (its task id)", seq, s.stream, s.opts.KeyHeader)
	}
	if out.Err != nil {
		out.Key = transport.FallbackKey(s.stream + "/" + strconv.FormatUint(seq, 10))
	}
	return out
}

var _ transport.Rereader = (*Source)(nil)

// Reread returns the stream's messages at sequences at (shard 0): a
// message get per sequence (jetstream.Stream.GetMsg).
func (s *Source) Reread(ctx context.Context, shard int, at []transport.Position) ([]*transport.Message, error) {
	if shard < 0 || shard >= max(len(s.subjects), 1) {
		return nil, fmt.Errorf("natsjs: shard %d of a source of %d", shard, max(len(s.subjects), 1))
	}
	st, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return nil, fmt.Errorf("natsjs: stream %s: %w", s.stream, err)
	}
	out := make([]*transport.Message, len(at))
	for i, p := range at {
		raw, err := st.GetMsg(ctx, p.Lo)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			out[i] = transport.Gone(shard, p, "message "+strconv.FormatUint(p.Lo, 10)+" of stream "+s.stream)
			continue
		case err != nil:
			return nil, fmt.Errorf("natsjs: message %d of %s: %w", p.Lo, s.stream, err)
		case len(s.subjects) > 0 && raw.Subject != s.subjects[shard]:
			// That sequence is another shard's: this one has nothing there.
			out[i] = transport.Gone(shard, p, "message "+strconv.FormatUint(p.Lo, 10)+" of "+s.subjects[shard]+" in stream "+s.stream)
			continue
		}
		out[i] = s.message(storedMsg{raw: raw, stream: s.stream})
	}
	return out, nil
}

// storedMsg is a message read back from the stream (GetMsg), as the
// jetstream.Msg that Options.Key and message take; it cannot be
// acknowledged (nothing consumed it).
type storedMsg struct {
	raw    *jetstream.RawStreamMsg
	stream string
}

var errStored = errors.New("natsjs: a message read back by sequence is not a consumer's: nothing to acknowledge")

func (m storedMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: m.raw.Sequence}, Timestamp: m.raw.Time, Stream: m.stream}, nil
}
func (m storedMsg) Data() []byte                     { return m.raw.Data }
func (m storedMsg) Headers() nats.Header             { return m.raw.Header }
func (m storedMsg) Subject() string                  { return m.raw.Subject }
func (m storedMsg) Reply() string                    { return "" }
func (m storedMsg) Ack() error                       { return errStored }
func (m storedMsg) DoubleAck(context.Context) error  { return errStored }
func (m storedMsg) Nak() error                       { return errStored }
func (m storedMsg) NakWithDelay(time.Duration) error { return errStored }
func (m storedMsg) InProgress() error                { return errStored }
func (m storedMsg) Term() error                      { return errStored }
func (m storedMsg) TermWithReason(string) error      { return errStored }

// Close stops the iterator and deletes the ordered consumer on the server
// at once (it would otherwise linger until its inactivity threshold).
func (r *reader) Close() error {
	_ = r.Closing.Close() // first, so a Fetch cut short reports ErrClosed
	r.once.Do(func() {
		r.it.Stop()
		if ci := r.cons.CachedInfo(); ci != nil {
			ctx, cancel := context.WithTimeout(context.Background(), DeleteTimeout)
			_ = r.s.js.DeleteConsumer(ctx, r.s.stream, ci.Name)
			cancel()
		}
	})
	return nil
}

var _ transport.Counter = (*Source)(nil)

// Backlog asks JetStream how many messages of each shard's subject (or of
// Options.Subjects, or the stream) are at or after from[s]: an ephemeral
// consumer per shard, started there, whose pending count the server keeps
// per subject (no message is delivered), deleted at once.
func (s *Source) Backlog(ctx context.Context, from []transport.Position) ([]int64, error) {
	st, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return nil, fmt.Errorf("natsjs: stream %s: %w", s.stream, err)
	}
	out := make([]int64, max(len(s.subjects), 1))
	for i := range out {
		cfg := jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, InactiveThreshold: time.Minute}
		if len(s.subjects) > 0 {
			cfg.FilterSubject = s.subjects[i]
		} else {
			cfg.FilterSubjects = s.opts.Subjects
		}
		if i < len(from) && from[i].Lo > 0 {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from[i].Lo
		}
		c, err := st.CreateConsumer(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("natsjs: counting the backlog of %s: %w", s.stream, err)
		}
		info := c.CachedInfo()
		out[i] = int64(info.NumPending)
		if err := st.DeleteConsumer(ctx, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("natsjs: deleting the consumer that counted %s: %w", s.stream, err)
		}
	}
	return out, nil
}
