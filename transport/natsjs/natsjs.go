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
}

// Defaults of Options.
const (
	DefaultBatch  = 512             // messages per Fetch
	DeleteTimeout = 2 * time.Second // bound of deleting the ordered consumer at Close
)

var _ transport.Source = (*Source)(nil)

// Source reads one stream.
type Source struct {
	js     jetstream.JetStream
	stream string
	opts   Options
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
	}
	if opts.KeyHeader == "" {
		opts.KeyHeader = "id"
	}
	if opts.Batch == 0 {
		opts.Batch = DefaultBatch
	}
	return &Source{js: js, stream: stream, opts: opts}, nil
}

// Info reports one shard ending after the stream's last sequence.
func (s *Source) Info(ctx context.Context) (transport.Info, error) {
	st, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return transport.Info{}, fmt.Errorf("natsjs: stream %s: %w", s.stream, err)
	}
	in, err := st.Info(ctx)
	if err != nil {
		return transport.Info{}, fmt.Errorf("natsjs: stream %s info: %w", s.stream, err)
	}
	return transport.Info{Log: true, Shards: 1, Ends: []transport.Position{transport.Offset(in.State.LastSeq + 1)}}, nil
}

// Open starts an ordered consumer at sequence from[0] (the stream's start
// without one).
func (s *Source) Open(ctx context.Context, from []transport.Position) (transport.Reader, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: s.opts.Subjects, DeliverPolicy: jetstream.DeliverAllPolicy}
	if len(from) > 0 && from[0].Lo > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from[0].Lo
	}
	cons, err := s.js.OrderedConsumer(ctx, s.stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("natsjs: ordered consumer on %s: %w", s.stream, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("natsjs: messages of %s: %w", s.stream, err)
	}
	return &reader{s: s, cons: cons, it: it}, nil
}

type reader struct {
	transport.Closing
	s    *Source
	cons jetstream.Consumer
	it   jetstream.MessagesContext
	once sync.Once
}

// Fetch waits for one message, then takes what else is already there.
// Iterator calls that end with the context leave their message in the
// iterator: nothing is consumed.
func (r *reader) Fetch(ctx context.Context) ([]*transport.Message, error) {
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
	out := []*transport.Message{r.s.message(m)}
	for len(out) < r.s.opts.Batch {
		m, err := r.it.Next(jetstream.NextMaxWait(time.Millisecond))
		if err != nil {
			break
		}
		out = append(out, r.s.message(m))
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
	h := m.Headers()
	if len(h) > 0 {
		out.Headers = make(map[string]string, len(h))
		for k := range h {
			out.Headers[k] = h.Get(k)
		}
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
	if shard != 0 {
		return nil, fmt.Errorf("natsjs: shard %d of a stream of one", shard)
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
			out[i] = transport.Gone(0, p, "message "+strconv.FormatUint(p.Lo, 10)+" of stream "+s.stream)
			continue
		case err != nil:
			return nil, fmt.Errorf("natsjs: message %d of %s: %w", p.Lo, s.stream, err)
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
