package kafkatopic

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nandi-go/nandi/internal/backoff"
	"github.com/nandi-go/nandi/transport"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
)

// Defaults of Options.
const (
	// DefaultMaxWait bounds one fetch from a broker: kafka-go's default of
	// 10s makes a reader take seconds to close.
	DefaultMaxWait = 100 * time.Millisecond
	// DefaultBuffer is how many messages are read ahead of Fetch.
	DefaultBuffer = 1024
	// DefaultBatch is the most messages one Fetch returns.
	DefaultBatch = 512
	// RetryWait is the shortest wait of a partition reader after a fetch
	// error; the wait grows with each failure in a row, with full jitter
	// (so that the readers of a fleet do not retry a broker together), up
	// to RetryMaxWait.
	RetryWait = 100 * time.Millisecond
	// RetryMaxWait is the longest wait of a partition reader between
	// failed fetches.
	RetryMaxWait = 5 * time.Second
)

// Options configure a Source.
type Options struct {
	// Key, if set, returns the task id of a message instead of its key.
	Key func(m kafka.Message) (string, error)
	// Reader is a template for the partition readers: every field but
	// Brokers, Topic, Partition and GroupID is used as given (a zero
	// MaxWait means DefaultMaxWait).
	Reader kafka.ReaderConfig
	// MaxWait bounds one fetch from a broker (default DefaultMaxWait);
	// Reader.MaxWait, when set, wins.
	MaxWait time.Duration
	// SASL and TLS authenticate and encrypt every connection: the
	// readers' (through their Dialer) and the metadata, offsets and
	// commits' (through Transport). Set them here once.
	SASL sasl.Mechanism
	TLS  *tls.Config
	// Dialer, if set, is the readers' dialer (deprecated in favour of
	// Reader.Dialer); SASL and TLS are added to a copy of it.
	Dialer *kafka.Dialer
	// Transport, if set, is used for metadata, offsets and commits; it is
	// then yours to configure (SASL and TLS are not added to it). Default:
	// one of the Source's own, with SASL and TLS.
	Transport *kafka.Transport
	// CommitGroup, if set, receives the group's low watermark as its
	// committed offsets.
	CommitGroup string
	// Buffer is how many messages are read ahead of Fetch (default
	// DefaultBuffer).
	Buffer int
	// Batch is the most messages one Fetch returns (default DefaultBatch).
	Batch int
	// Aligned declares a topic written with Balancer (each key in
	// partition TaskID(key) % partitions): a worker then reads only the
	// partitions its lease can own ids in (transport.Info.Aligned). A topic
	// written by another partitioner (kafka-go's Hash, murmur2, CRC32,
	// round robin) must be read without it: every worker reads every
	// partition.
	Aligned bool
}

// Balancer places a message's key in partition TaskID(key) % partitions,
// the task id the group's filter uses (transport.TaskID), so that
// partition p holds only ids with id % partitions == p: give it to
// kafka-go's Writer (Writer.Balancer), and read the topic with
// Options.Aligned. A message without a key goes to the first partition
// given (0), where its reader sends it to the failure policy. Adding
// partitions later keeps what was written before aligned to the old
// count: the consumer's checkpoints remember it, and read the new
// partitions with every worker.
type Balancer struct{}

var _ kafka.Balancer = Balancer{}

// Balance implements kafka.Balancer.
func (Balancer) Balance(msg kafka.Message, partitions ...int) int {
	if len(partitions) == 0 {
		return 0
	}
	if len(msg.Key) == 0 {
		return partitions[0] // no task id to place it by
	}
	return partitions[transport.TaskID(string(msg.Key))%uint64(len(partitions))]
}

// Source reads one topic.
type Source struct {
	brokers []string
	topic   string
	opts    Options
	reader  kafka.ReaderConfig // the template, completed
	client  *kafka.Client
	own     *kafka.Transport // closed by Close when not the user's
	errors  atomic.Int64
}

var (
	_ transport.Source      = (*Source)(nil)
	_ transport.Trimmer     = (*Source)(nil)
	_ transport.ShardOpener = (*Source)(nil)
)

// New returns a Source for topic on brokers. It does no I/O. Close it when
// done, to release the connections of its own Transport. Bad options are
// refused with an error wrapping transport.ErrInvalidOptions.
func New(brokers []string, topic string, opts Options) (*Source, error) {
	switch {
	case len(brokers) == 0:
		return nil, transport.Invalid("kafkatopic: no broker address")
	case topic == "":
		return nil, transport.Invalid("kafkatopic: topic is empty")
	case opts.MaxWait < 0 || opts.Reader.MaxWait < 0:
		return nil, transport.Invalid("kafkatopic: MaxWait is negative")
	case opts.Buffer < 0:
		return nil, transport.Invalid("kafkatopic: Buffer is %d; it must not be negative (0: %d)", opts.Buffer, DefaultBuffer)
	case opts.Batch < 0:
		return nil, transport.Invalid("kafkatopic: Batch is %d; it must not be negative (0: %d)", opts.Batch, DefaultBatch)
	case opts.Reader.GroupID != "":
		return nil, transport.Invalid("kafkatopic: Reader.GroupID is set; every worker reads every partition itself (use CommitGroup for lag tools)")
	}
	if opts.MaxWait == 0 {
		opts.MaxWait = DefaultMaxWait
	}
	if opts.Buffer == 0 {
		opts.Buffer = DefaultBuffer
	}
	if opts.Batch == 0 {
		opts.Batch = DefaultBatch
	}
	s := &Source{brokers: brokers, topic: topic, opts: opts}
	rc := opts.Reader
	rc.Brokers, rc.Topic = brokers, topic
	if rc.MaxWait == 0 {
		rc.MaxWait = opts.MaxWait
	}
	d := rc.Dialer
	if d == nil {
		d = opts.Dialer
	}
	if opts.SASL != nil || opts.TLS != nil {
		var c kafka.Dialer
		if d != nil {
			c = *d
		} else {
			c = kafka.Dialer{Timeout: 10 * time.Second, DualStack: true}
		}
		if opts.SASL != nil {
			c.SASLMechanism = opts.SASL
		}
		if opts.TLS != nil {
			c.TLS = opts.TLS
		}
		d = &c
	}
	rc.Dialer = d
	s.reader = rc
	tr := opts.Transport
	if tr == nil {
		s.own = &kafka.Transport{SASL: opts.SASL, TLS: opts.TLS}
		tr = s.own
	}
	s.client = &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr}
	return s, nil
}

// FetchErrors counts the partition readers' fetch errors (each is also
// returned by a Fetch).
func (s *Source) FetchErrors() int64 { return s.errors.Load() }

// Close releases the Source's own connections.
func (s *Source) Close() error {
	s.done()
	return nil
}

// done closes the idle connections of the Source's own Transport after
// each call: they are occasional (Info, Open, commits), and an idle pool
// would keep goroutines for nothing.
func (s *Source) done() {
	if s.own != nil {
		s.own.CloseIdleConnections()
	}
}

func (s *Source) partitions(ctx context.Context) ([]int, error) {
	defer s.done()
	md, err := s.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{s.topic}})
	if err != nil {
		return nil, fmt.Errorf("kafkatopic: metadata of %s: %w", s.topic, err)
	}
	for _, t := range md.Topics {
		if t.Name != s.topic {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("kafkatopic: topic %s: %w", s.topic, t.Error)
		}
		var ps []int
		for _, p := range t.Partitions {
			ps = append(ps, p.ID)
		}
		sort.Ints(ps)
		return ps, nil
	}
	return nil, fmt.Errorf("kafkatopic: topic %s not found", s.topic)
}

// offsets returns the first and the next offset of every partition.
func (s *Source) offsets(ctx context.Context, n int) (first, next []int64, err error) {
	defer s.done()
	var reqs []kafka.OffsetRequest
	for p := range n {
		reqs = append(reqs, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	res, err := s.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{s.topic: reqs}})
	if err != nil {
		return nil, nil, fmt.Errorf("kafkatopic: offsets of %s: %w", s.topic, err)
	}
	first, next = make([]int64, n), make([]int64, n)
	for _, po := range res.Topics[s.topic] {
		if po.Error != nil {
			return nil, nil, fmt.Errorf("kafkatopic: offsets of %s/%d: %w", s.topic, po.Partition, po.Error)
		}
		if po.Partition < n {
			first[po.Partition], next[po.Partition] = po.FirstOffset, po.LastOffset
		}
	}
	return first, next, nil
}

// Info reports the topic's partitions as shards, ending at their next
// offsets.
func (s *Source) Info(ctx context.Context) (transport.Info, error) {
	ps, err := s.partitions(ctx)
	if err != nil {
		return transport.Info{}, err
	}
	_, next, err := s.offsets(ctx, len(ps))
	if err != nil {
		return transport.Info{}, err
	}
	ends := make([]transport.Position, len(ps))
	for i, o := range next {
		ends[i] = transport.Offset(uint64(max(o, 0)))
	}
	return transport.Info{Log: true, Shards: len(ps), Ends: ends, Aligned: s.opts.Aligned, System: "kafka", Destinations: []string{s.topic}}, nil
}

// Open starts one reader per partition at from[p] (or the partition's first
// offset, when from[p] is before it: retention removed the rest).
func (s *Source) Open(ctx context.Context, from []transport.Position) (transport.Reader, error) {
	return s.OpenShards(ctx, from, nil)
}

// OpenShards is Open for the partitions listed only (nil: all of them).
func (s *Source) OpenShards(ctx context.Context, from []transport.Position, shards []int) (transport.Reader, error) {
	ps, err := s.partitions(ctx)
	if err != nil {
		return nil, err
	}
	n := len(ps)
	if shards != nil {
		for _, p := range shards {
			if p < 0 || p >= n {
				return nil, fmt.Errorf("kafkatopic: partition %d of a topic of %d", p, n)
			}
		}
		ps = shards
	}
	first, _, err := s.offsets(ctx, n)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithCancel(context.Background())
	r := &reader{s: s, ch: make(chan kafka.Message, s.opts.Buffer), cancel: cancel}
	for _, p := range ps {
		start := first[p]
		if p < len(from) && int64(from[p].Lo) > start {
			start = int64(from[p].Lo)
		}
		rc := s.reader
		rc.Partition = p
		kr := kafka.NewReader(rc)
		if err := kr.SetOffset(start); err != nil {
			cancel()
			_ = kr.Close()
			r.closeReaders()
			return nil, fmt.Errorf("kafkatopic: %s/%d at %d: %w", s.topic, p, start, err)
		}
		r.readers = append(r.readers, kr)
		r.wg.Go(func() { r.pump(pctx, kr) })
	}
	return r, nil
}

type reader struct {
	transport.Closing
	s       *Source
	readers []*kafka.Reader
	ch      chan kafka.Message
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once
	failed  atomic.Pointer[error] // the latest fetch error not yet returned
}

// pump moves one partition's messages into the shared channel, in order.
// A fetch error is kept for Fetch to return, and retried after a jittered
// backoff from RetryWait to RetryMaxWait.
func (r *reader) pump(ctx context.Context, kr *kafka.Reader) {
	failures := 0
	for {
		m, err := kr.FetchMessage(ctx)
		if err == nil {
			failures = 0
		} else {
			if ctx.Err() != nil {
				return
			}
			r.s.errors.Add(1)
			err = fmt.Errorf("kafkatopic: fetch %s/%d: %w", r.s.topic, kr.Config().Partition, err)
			r.failed.Store(&err)
			failures++
			select {
			case <-time.After(backoff.Delay(failures, RetryWait, RetryMaxWait)):
				continue
			case <-ctx.Done():
				return
			}
		}
		select {
		case r.ch <- m:
		case <-ctx.Done():
			return
		}
	}
}

// Fetch returns what the partition readers have read, up to Batch. When
// there is nothing and a reader has failed since the last Fetch, it
// returns that error (the readers go on retrying).
func (r *reader) Fetch(ctx context.Context) ([]*transport.Message, error) {
	if err := r.Err(ctx); err != nil {
		return nil, err
	}
	var first kafka.Message
	select {
	case first = <-r.ch:
	default:
		if e := r.failed.Swap(nil); e != nil {
			return nil, *e
		}
		tick := time.NewTicker(RetryWait)
		defer tick.Stop()
	wait:
		for {
			select {
			case first = <-r.ch:
				break wait
			case <-tick.C:
				if e := r.failed.Swap(nil); e != nil {
					return nil, *e
				}
			case <-r.Done():
				return nil, transport.ErrClosed
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	n := min(1+len(r.ch), r.s.opts.Batch)
	slab := make([]transport.Message, n)
	out := make([]*transport.Message, 0, n)
	r.s.message(&slab[0], first)
	out = append(out, &slab[0])
	for len(out) < n {
		select {
		case m := <-r.ch:
			r.s.message(&slab[len(out)], m)
			out = append(out, &slab[len(out)])
		default:
			return out, nil
		}
	}
	return out, nil
}

func (s *Source) message(out *transport.Message, m kafka.Message) {
	*out = transport.Message{Payload: m.Value, Shard: m.Partition, Position: transport.Offset(uint64(m.Offset))}
	if len(m.Headers) > 0 {
		out.Headers = make(map[string]string, len(m.Headers))
		for _, h := range m.Headers {
			out.Headers[h.Key] = string(h.Value)
		}
	}
	switch {
	case s.opts.Key != nil:
		out.Key, out.Err = s.opts.Key(m)
	case len(m.Key) > 0:
		out.Key = string(m.Key)
	default:
		out.Err = fmt.Errorf("kafkatopic: message %s/%d@%d has no key (its task id)", s.topic, m.Partition, m.Offset)
	}
	if out.Err != nil {
		out.Key = transport.FallbackKey(strconv.Itoa(m.Partition) + "@" + strconv.FormatInt(m.Offset, 10))
	}
}

var _ transport.Rereader = (*Source)(nil)

// rereadMaxBytes bounds one fetch of Reread.
const rereadMaxBytes = 1 << 20

// Reread returns partition shard's messages at offsets at: a fetch from
// the first offset still wanted, reading on through the batch the broker
// returns, and another fetch from the next offset still wanted.
func (s *Source) Reread(ctx context.Context, shard int, at []transport.Position) ([]*transport.Message, error) {
	defer s.done()
	out := make([]*transport.Message, len(at))
	for i := 0; i < len(at); {
		want := int64(at[i].Lo)
		res, err := s.client.Fetch(ctx, &kafka.FetchRequest{Topic: s.topic, Partition: shard, Offset: want,
			MinBytes: 1, MaxBytes: rereadMaxBytes, MaxWait: s.reader.MaxWait})
		if err == nil {
			err = res.Error
		}
		switch {
		case errors.Is(err, kafka.OffsetOutOfRange):
			out[i] = s.gone(shard, at[i])
			i++
			continue
		case err != nil:
			return nil, fmt.Errorf("kafkatopic: fetch %s/%d at %d: %w", s.topic, shard, want, err)
		}
		progressed := false
		for i < len(at) {
			rec, err := res.Records.ReadRecord()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("kafkatopic: reading %s/%d at %d: %w", s.topic, shard, want, err)
			}
			for i < len(at) && int64(at[i].Lo) < rec.Offset {
				out[i] = s.gone(shard, at[i]) // compacted away
				i, progressed = i+1, true
			}
			if i < len(at) && int64(at[i].Lo) == rec.Offset {
				m, err := record(s.topic, shard, rec)
				if err != nil {
					return nil, err
				}
				out[i] = &transport.Message{}
				s.message(out[i], m)
				i, progressed = i+1, true
			}
		}
		if !progressed && i < len(at) {
			// Nothing at or after the offset wanted: past the partition's
			// end, or removed.
			out[i] = s.gone(shard, at[i])
			i++
		}
	}
	return out, nil
}

func (s *Source) gone(shard int, p transport.Position) *transport.Message {
	return transport.Gone(shard, p, fmt.Sprintf("message %s/%d@%d", s.topic, shard, p.Lo))
}

// record makes a kafka.Message of a record a fetch returned.
func record(topic string, partition int, rec *kafka.Record) (kafka.Message, error) {
	m := kafka.Message{Topic: topic, Partition: partition, Offset: rec.Offset, Time: rec.Time, Headers: slices.Clone(rec.Headers)}
	var err1, err2 error
	if rec.Key != nil {
		m.Key, err1 = io.ReadAll(rec.Key)
	}
	if rec.Value != nil {
		m.Value, err2 = io.ReadAll(rec.Value)
	}
	if err := errors.Join(err1, err2); err != nil {
		return m, fmt.Errorf("kafkatopic: reading %s/%d@%d: %w", topic, partition, rec.Offset, err)
	}
	return m, nil
}

func (r *reader) Close() error {
	_ = r.Closing.Close()
	r.once.Do(func() {
		r.cancel()
		r.wg.Wait()
		r.closeReaders()
	})
	return nil
}

func (r *reader) closeReaders() {
	for _, kr := range r.readers {
		_ = kr.Close()
	}
}

// Trim commits below as the offset of CommitGroup for partition shard (a
// no-op without CommitGroup): the group's low watermark, for lag tools.
func (s *Source) Trim(ctx context.Context, shard int, below transport.Position) error {
	if s.opts.CommitGroup == "" {
		return nil
	}
	defer s.done()
	res, err := s.client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{
		GroupID: s.opts.CommitGroup, GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{s.topic: {{Partition: shard, Offset: int64(below.Lo)}}},
	})
	if err != nil {
		return fmt.Errorf("kafkatopic: commit %s %s/%d=%d: %w", s.opts.CommitGroup, s.topic, shard, below.Lo, err)
	}
	for _, ps := range res.Topics[s.topic] {
		if ps.Error != nil {
			return fmt.Errorf("kafkatopic: commit %s %s/%d=%d: %w", s.opts.CommitGroup, s.topic, shard, below.Lo, ps.Error)
		}
	}
	return nil
}

var _ transport.Counter = (*Source)(nil)

// Backlog is each partition's next offset minus from[p] (or minus its
// first offset, when from[p] is before it or zero): one ListOffsets
// request. Offsets count records, so on a compacted topic, or one with
// transaction markers, it is an upper bound.
func (s *Source) Backlog(ctx context.Context, from []transport.Position) ([]int64, error) {
	ps, err := s.partitions(ctx)
	if err != nil {
		return nil, err
	}
	first, next, err := s.offsets(ctx, len(ps))
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(ps))
	for p := range out {
		start := first[p]
		if p < len(from) && int64(from[p].Lo) > start {
			start = int64(from[p].Lo)
		}
		out[p] = max(next[p]-start, 0)
	}
	return out, nil
}
