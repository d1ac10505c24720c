package redisstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

// Defaults of Options.
const (
	DefaultCount = 512                    // entries per XREAD
	DefaultBlock = 100 * time.Millisecond // longest wait of one XREAD
)

// Options configure a Source.
type Options struct {
	KeyField     string // the entry field holding the task id; default "id"
	PayloadField string // the entry field that becomes Message.Payload; default "payload"
	// OptionalPayload accepts entries without PayloadField (their payload
	// is empty). By default such an entry is malformed: it goes to the
	// failure policy with an error naming its fields, like an entry
	// without its id, rather than be handled as an empty task (a producer
	// that named the field otherwise, "data" say, would have every body
	// arrive as a header).
	OptionalPayload bool

	// Key, if set, returns the task id of an entry instead of KeyField.
	Key func(id string, values map[string]any) (string, error)
	// Count is the most entries one XREAD returns per stream (default 512).
	Count int64
	// Block is the longest one XREAD blocks (default 100ms, at least 1ms).
	Block time.Duration
	// Trim lets the group trim the streams below what every index has
	// checkpointed (XTRIM MINID, exact), never past what another consumer
	// group has not been delivered or has pending.
	Trim bool
	// Group, if set, is a Redis consumer group whose last-delivered ID
	// follows the nandi group's low watermark, with its entries-read (Redis
	// 7), so that XINFO GROUPS reports the nandi group's lag in entries and
	// KEDA's redis-streams scaler (or any lag exporter) can read it. It
	// follows at each trim, about once a lease interval, Trim on or off.
	Group string
	// Logger receives what a trim held back for another group and what a
	// producer trimmed away unread, at Warn, once per spell; nil is silent.
	Logger *slog.Logger
	// Unaligned declares streams written with the placement of nandi
	// before aligned shards (LegacyShard: FNV-1a of the key's bytes), or
	// by any other rule than Shard: every worker then reads every stream,
	// as it did. By default the streams of NewSharded are aligned (a
	// producer wrote each key to StreamFor(key)): a worker reads only the
	// streams its lease can own ids in (transport.Info.Aligned).
	Unaligned bool
}

// Source reads one stream, or several as shards. It implements
// transport.Source, and transport.Trimmer when Options.Trim is set.
type Source struct {
	c       redis.UniversalClient
	streams []string
	cluster bool // one XREAD per stream, pipelined
	opts    Options
	log     *slog.Logger

	marks    readMarks    // for Backlog and the consumer group's entries-read
	lost     atomic.Int64 // trims found to have removed unread entries
	heldBack atomic.Bool  // the last trim stopped below another group
}

var (
	_ transport.Source      = (*Source)(nil)
	_ transport.Trimmer     = (*Source)(nil)
	_ transport.ShardOpener = (*Source)(nil)
)

// New returns a Source for stream on client. It does no I/O.
func New(client redis.UniversalClient, stream string, opts Options) (*Source, error) {
	return NewSharded(client, []string{stream}, opts)
}

// NewSharded returns a Source over streams on client, stream i being shard
// i. Keep the list and its order the same on every worker and producer.
// It does no I/O.
func NewSharded(client redis.UniversalClient, streams []string, opts Options) (*Source, error) {
	if client == nil {
		return nil, transport.Invalid("redisstream: client is nil")
	}
	if len(streams) == 0 {
		return nil, transport.Invalid("redisstream: no stream given")
	}
	seen := map[string]bool{}
	for _, s := range streams {
		if s == "" {
			return nil, transport.Invalid("redisstream: a stream name is empty")
		}
		if seen[s] {
			return nil, transport.Invalid("redisstream: stream %q is given twice", s)
		}
		seen[s] = true
	}
	if opts.Count < 0 {
		return nil, transport.Invalid("redisstream: Count is %d; it must not be negative (0: %d)", opts.Count, DefaultCount)
	}
	if opts.KeyField == "" {
		opts.KeyField = "id"
	}
	if opts.PayloadField == "" {
		opts.PayloadField = "payload"
	}
	if opts.Count == 0 {
		opts.Count = DefaultCount
	}
	if opts.Block == 0 {
		opts.Block = DefaultBlock
	}
	if opts.Block < time.Millisecond {
		return nil, transport.Invalid("redisstream: Block is %v; it must be at least 1ms (XREAD BLOCK 0 waits forever)", opts.Block)
	}
	_, cluster := client.(*redis.ClusterClient)
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Source{c: client, streams: append([]string(nil), streams...), cluster: cluster, opts: opts, log: log}, nil
}

var _ transport.Dropper = (*Source)(nil)

// Dropped counts the trims found to have removed entries the group had not
// read (a producer's MAXLEN or MINID ahead of the group): each is at least
// one entry lost, logged with its range (Redis does not keep how many
// entries a trim removed). It implements transport.Dropper.
func (s *Source) Dropped() int64 { return s.lost.Load() }

// Names returns the names of n streams prefix:{0} .. prefix:{n-1}: each its
// own Redis Cluster hash tag, so a cluster spreads them over its masters.
func Names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + ":{" + strconv.Itoa(i) + "}"
	}
	return out
}

// Shard returns the shard (of n) that a producer writes key to: its task
// id modulo n (transport.TaskID, the id the group's filter uses), so that
// stream s holds only ids with id % n == s and each worker reads only the
// streams its lease can own ids in. Every entry of a key is in one stream,
// in order.
func Shard(key string, n int) int { return int(transport.TaskID(key) % uint64(n)) }

// LegacyShard is the placement of nandi before aligned shards: FNV-1a 64 of
// the key's bytes, modulo n. Streams written with it are read with
// Options.Unaligned.
func LegacyShard(key string, n int) int { return int(transport.KeyHash(key) % uint64(n)) }

// StreamFor returns the stream a producer writes key's entries to (Shard,
// or LegacyShard with Options.Unaligned), so that each key's entries stay
// in one stream, in order.
func (s *Source) StreamFor(key string) string {
	if s.opts.Unaligned {
		return s.streams[LegacyShard(key, len(s.streams))]
	}
	return s.streams[Shard(key, len(s.streams))]
}

// Stream returns the first stream's name (the only one of New's).
func (s *Source) Stream() string { return s.streams[0] }

// Streams returns the streams, shard by shard.
func (s *Source) Streams() []string { return append([]string(nil), s.streams...) }

// Info reports a log of one shard per stream, each ending after its last
// generated ID (a missing stream ends at 0-1).
func (s *Source) Info(ctx context.Context) (transport.Info, error) {
	pipe := s.c.Pipeline()
	cmds := make([]*redis.XInfoStreamCmd, len(s.streams))
	for i, st := range s.streams {
		cmds[i] = pipe.XInfoStream(ctx, st)
	}
	_, _ = pipe.Exec(ctx)
	ends := make([]transport.Position, len(s.streams))
	for i, cmd := range cmds {
		last := "0-0"
		xi, err := cmd.Result()
		switch {
		case err == nil:
			last = xi.LastGeneratedID
		case strings.Contains(err.Error(), "no such key"):
		default:
			return transport.Info{}, fmt.Errorf("redisstream: XINFO STREAM %s: %w", s.streams[i], err)
		}
		p, err := parseID(last)
		if err != nil {
			return transport.Info{}, err
		}
		ends[i] = p.Next()
	}
	return transport.Info{Log: true, Shards: len(s.streams), Ends: ends, Aligned: !s.opts.Unaligned, System: "redis", Destinations: s.streams}, nil
}

// Open starts reading each stream at from[shard] (its start without one).
// It first checks that nothing at or after from was trimmed away unread.
func (s *Source) Open(ctx context.Context, from []transport.Position) (transport.Reader, error) {
	all := make([]int, len(s.streams))
	for i := range all {
		all[i] = i
	}
	return s.OpenShards(ctx, from, all)
}

// OpenShards is Open for the streams of shards only: one XREAD (on a
// Cluster, one per stream, pipelined) over them.
func (s *Source) OpenShards(ctx context.Context, from []transport.Position, shards []int) (transport.Reader, error) {
	r := &reader{s: s, args: make([]string, 2*len(shards)), shard: make([]int, len(shards))}
	for j, i := range shards {
		if i < 0 || i >= len(s.streams) {
			return nil, fmt.Errorf("redisstream: shard %d of a source of %d streams", i, len(s.streams))
		}
		var start transport.Position
		if i < len(from) {
			start = from[i]
		}
		r.args[j] = s.streams[i]
		r.args[len(shards)+j] = formatID(before(start))
		r.shard[j] = i
	}
	s.checkLost(ctx, from, shards)
	return r, nil
}

// checkLost reports the streams whose entries at or after from were
// removed before the group read them. A checkpoint's position is either
// the first unfinished entry or the one after the last read; the group's
// own Trim keeps the entry just before its low watermark, so one of the
// two entries is in the stream unless something else removed it: a
// producer's MAXLEN or MINID that overtook the group (or an XDEL of those
// very entries). A group that had not read a stream (from at its start)
// has lost nothing of it.
func (s *Source) checkLost(ctx context.Context, from []transport.Position, read []int) {
	var shards []int
	for _, i := range read {
		if i < len(from) && (from[i] != transport.Position{}) {
			shards = append(shards, i)
		}
	}
	if len(shards) == 0 {
		return
	}
	pipe := s.c.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(shards))
	for j, i := range shards {
		cmds[j] = pipe.XRangeN(ctx, s.streams[i], formatID(before(from[i])), "+", 1)
	}
	_, _ = pipe.Exec(ctx)
	for j, i := range shards {
		ms, err := cmds[j].Result()
		if err != nil {
			continue
		}
		first := transport.Position{Hi: ^uint64(0), Lo: ^uint64(0)}
		if len(ms) > 0 {
			if p, err := parseID(ms[0].ID); err == nil {
				first = p
			}
		}
		if !from[i].Less(first) {
			continue // the last entry read, or the first unfinished one, is still there
		}
		if len(ms) == 0 {
			// Nothing at or after: lost only if the stream has entries at
			// all (an empty or deleted stream is another story: a rewind).
			continue
		}
		s.lost.Add(1)
		s.log.Warn("entries trimmed away before the group read them (a producer's MAXLEN or MINID ahead of the group): lost",
			"stream", s.streams[i], "from", formatID(from[i]), "to", formatID(before(first)))
	}
}

// Trim is told, about once an interval, that the group's low watermark in
// a shard's stream is below: every index has finished the entries before
// it. With Options.Group it becomes that consumer group's last-delivered
// ID; with Options.Trim the entries before it are removed (XTRIM MINID),
// but never one that another consumer group has not been delivered or has
// pending.
func (s *Source) Trim(ctx context.Context, shard int, below transport.Position) error {
	if shard < 0 || shard >= len(s.streams) || (below == transport.Position{}) {
		return nil
	}
	st := s.streams[shard]
	if s.opts.Group != "" {
		if err := s.setGroupID(ctx, st, before(below)); err != nil {
			return err
		}
	}
	if !s.opts.Trim {
		return nil
	}
	keep, by, err := s.keptFor(ctx, st)
	if err != nil {
		return err
	}
	if by != "" && keep.Less(below) {
		if s.heldBack.CompareAndSwap(false, true) {
			s.log.Warn("trim held back: another consumer group has not been delivered (or has pending) entries the nandi group finished",
				"stream", st, "group", by, "keeps_from", formatID(keep), "nandi_low", formatID(below))
		}
		below = keep
	} else if s.heldBack.CompareAndSwap(true, false) {
		s.log.Info("trim no longer held back", "stream", st)
	}
	// Keep the entry just before the watermark: the next term that opens
	// the stream looks for it to tell a producer's trim from the group's.
	keepFrom := before(below)
	if err := s.c.XTrimMinID(ctx, st, formatID(keepFrom)).Err(); err != nil {
		return fmt.Errorf("redisstream: XTRIM %s MINID %s: %w", st, formatID(keepFrom), err)
	}
	return nil
}

// keptFor returns the first entry of stream that another consumer group
// still needs (its oldest pending entry, or the entry after its
// last-delivered one) and that group's name; by is "" when none does.
func (s *Source) keptFor(ctx context.Context, stream string) (keep transport.Position, by string, err error) {
	groups, err := s.c.XInfoGroups(ctx, stream).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return keep, "", nil
		}
		return keep, "", fmt.Errorf("redisstream: XINFO GROUPS %s: %w", stream, err)
	}
	for _, g := range groups {
		if g.Name == s.opts.Group {
			continue
		}
		need, err := parseID(g.LastDeliveredID)
		if err != nil {
			continue
		}
		need = need.Next()
		if g.Pending > 0 {
			if p, err := s.c.XPending(ctx, stream, g.Name).Result(); err == nil && p.Count > 0 {
				if low, err := parseID(p.Lower); err == nil && low.Less(need) {
					need = low
				}
			}
		}
		if by == "" || need.Less(keep) {
			keep, by = need, g.Name
		}
	}
	return keep, by, nil
}

var _ transport.Rereader = (*Source)(nil)

// Reread returns the entries at positions at of shard's stream: one
// XRANGE ID ID per position, pipelined in one round trip.
func (s *Source) Reread(ctx context.Context, shard int, at []transport.Position) ([]*transport.Message, error) {
	if shard < 0 || shard >= len(s.streams) {
		return nil, fmt.Errorf("redisstream: shard %d of a source of %d streams", shard, len(s.streams))
	}
	if len(at) == 0 {
		return nil, nil
	}
	st := s.streams[shard]
	pipe := s.c.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(at))
	for i, p := range at {
		id := formatID(p)
		cmds[i] = pipe.XRangeN(ctx, st, id, id, 1)
	}
	_, _ = pipe.Exec(ctx)
	out := make([]*transport.Message, len(at))
	slab := make([]transport.Message, len(at))
	for i, cmd := range cmds {
		xs, err := cmd.Result()
		if err != nil {
			return nil, fmt.Errorf("redisstream: XRANGE %s %s: %w", st, formatID(at[i]), err)
		}
		if len(xs) == 0 {
			out[i] = transport.Gone(shard, at[i], "entry "+formatID(at[i])+" of stream "+st)
			continue
		}
		if err := s.message(&slab[i], xs[0], shard); err != nil {
			return nil, err
		}
		out[i] = &slab[i]
	}
	return out, nil
}

type reader struct {
	transport.Closing
	s     *Source
	args  []string // XREAD's STREAMS: the names, then where each reads after; used by Fetch only
	shard []int    // the shard of each stream read, in args' order
}

func (r *reader) Fetch(ctx context.Context) ([]*transport.Message, error) {
	var wait time.Duration // the cluster's poll backoff
	for {
		if err := r.Err(ctx); err != nil {
			return nil, err
		}
		res, err := r.read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		out, err := r.take(res)
		if err != nil || len(out) > 0 {
			return out, err
		}
		if r.s.cluster {
			wait = min(max(2*wait, time.Millisecond), r.s.opts.Block)
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			case <-r.Done():
				t.Stop()
				return nil, transport.ErrClosed
			}
		}
	}
}

// take decodes what XREAD returned and then moves each stream's read
// position past it. A batch that cannot be decoded moves nothing: the
// next Fetch reads it again, and nothing is skipped.
func (r *reader) take(res []redis.XStream) ([]*transport.Message, error) {
	out, err := r.decode(res)
	if err != nil || len(out) == 0 {
		return nil, err
	}
	n := len(r.shard)
	for _, st := range res {
		if k := len(st.Messages); k > 0 {
			r.args[n+r.slot(st.Stream)] = st.Messages[k-1].ID
		}
	}
	return out, nil
}

// read reads every stream of the reader once: one XREAD on a single
// server (blocking), one per stream pipelined on a cluster (not blocking).
func (r *reader) read(ctx context.Context) ([]redis.XStream, error) {
	s := r.s
	n := len(r.shard)
	if !s.cluster {
		block := s.opts.Block
		if d, ok := ctx.Deadline(); ok {
			block = max(min(block, time.Until(d)), time.Millisecond)
		}
		res, err := s.c.XRead(ctx, &redis.XReadArgs{Streams: r.args, Count: s.opts.Count, Block: block}).Result()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("redisstream: XREAD %s: %w", strings.Join(r.args[:n], " "), err)
		}
		return res, nil
	}
	pipe := s.c.Pipeline()
	cmds := make([]*redis.XStreamSliceCmd, n)
	for i := range n {
		cmds[i] = pipe.XRead(ctx, &redis.XReadArgs{Streams: []string{r.args[i], r.args[n+i]}, Count: s.opts.Count, Block: -1})
	}
	_, _ = pipe.Exec(ctx)
	var out []redis.XStream
	for i, cmd := range cmds {
		res, err := cmd.Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("redisstream: XREAD %s: %w", r.args[i], err)
		}
		out = append(out, res...)
	}
	return out, nil
}

// decode makes messages of what XREAD returned, with one allocation for
// the messages themselves.
func (r *reader) decode(res []redis.XStream) ([]*transport.Message, error) {
	total := 0
	for _, st := range res {
		total += len(st.Messages)
	}
	if total == 0 {
		return nil, nil
	}
	out := make([]*transport.Message, 0, total)
	slab := make([]transport.Message, total)
	for _, st := range res {
		j := r.slot(st.Stream)
		if j < 0 {
			return nil, fmt.Errorf("redisstream: XREAD returned stream %q, which is not one this reader reads", st.Stream)
		}
		shard := r.shard[j]
		for _, x := range st.Messages {
			m := &slab[len(out)]
			if err := r.s.message(m, x, shard); err != nil {
				return nil, err
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// slot returns where stream is in the reader's args, -1 if it is not read.
func (r *reader) slot(stream string) int {
	for j, name := range r.args[:len(r.shard)] {
		if name == stream {
			return j
		}
	}
	return -1
}

// message fills m from entry x of shard.
func (s *Source) message(m *transport.Message, x redis.XMessage, shard int) error {
	p, err := parseID(x.ID)
	if err != nil {
		return err
	}
	*m = transport.Message{Shard: shard, Position: p}
	key, hasKey := x.Values[s.opts.KeyField]
	if s.opts.Key != nil {
		m.Key, m.Err = s.opts.Key(x.ID, x.Values)
	} else if hasKey {
		m.Key = text(key)
	} else {
		m.Err = fmt.Errorf("redisstream: entry %s of stream %s has no field %q (its task id)", x.ID, s.streams[shard], s.opts.KeyField)
	}
	if m.Err != nil {
		m.Key = transport.FallbackKey(s.streams[shard] + "/" + x.ID) // spreads such entries over the group; the owner reports it
	}
	payload, hasPayload := x.Values[s.opts.PayloadField]
	if hasPayload {
		m.Payload = ownBytes(text(payload))
	} else if m.Err == nil && !s.opts.OptionalPayload {
		m.Err = fmt.Errorf("redisstream: entry %s of stream %s has no field %q (its payload; it has %s): set Options.PayloadField to the field that holds it, or Options.OptionalPayload if entries may have none",
			x.ID, s.streams[shard], s.opts.PayloadField, fieldNames(x.Values))
	}
	// Every other field is a header (no map when there is none).
	known := 0
	if hasKey {
		known++
	}
	if hasPayload {
		known++
	}
	if len(x.Values) > known {
		m.Headers = make(map[string]string, len(x.Values)-known)
		for f, v := range x.Values {
			if f != s.opts.KeyField && f != s.opts.PayloadField {
				m.Headers[f] = text(v)
			}
		}
	}
	return nil
}

// fieldNames lists an entry's fields, sorted, quoted.
func fieldNames(values map[string]any) string {
	names := make([]string, 0, len(values))
	for f := range values {
		names = append(names, strconv.Quote(f))
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "no fields"
	}
	return strings.Join(names, ", ")
}

// ownBytes returns the bytes of a value go-redis returned, without a
// copy. go-redis reads each bulk string of a reply into a buffer of its
// own (proto.Reader.readStringReply) and the entry is dropped once
// decoded, so the message owns those bytes: a handler may change them as
// it could a copy. (An Options.Key that keeps the entry's values sees
// such a change; nothing else does.) Empty is not nil, as a copy is not.
func ownBytes(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// text is a field's value as go-redis returns it (a string), without
// fmt's allocation.
func text(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

func parseID(id string) (transport.Position, error) {
	if p, ok := fastID(id); ok {
		return p, nil
	}
	p, err := transport.ParsePosition(id)
	if err != nil {
		return p, fmt.Errorf("redisstream: entry ID %q: %w", id, err)
	}
	return p, nil
}

// fastID parses the usual "ms-seq" of plain digits without strconv's
// generality; anything else (too long, other characters) goes to
// transport.ParsePosition, which FuzzMessage holds it to.
func fastID(id string) (transport.Position, bool) {
	var p transport.Position
	i, n := 0, uint64(0)
	digits := 0
	for ; i < len(id) && id[i] != '-'; i++ {
		d := id[i] - '0'
		if d > 9 || digits == 19 {
			return p, false
		}
		n = n*10 + uint64(d)
		digits++
	}
	if i == len(id) || digits == 0 {
		return p, false
	}
	p.Hi, n, digits = n, 0, 0
	for i++; i < len(id); i++ {
		d := id[i] - '0'
		if d > 9 || digits == 19 {
			return p, false
		}
		n = n*10 + uint64(d)
		digits++
	}
	if digits == 0 {
		return p, false
	}
	p.Lo = n
	return p, true
}

func formatID(p transport.Position) string {
	return strconv.FormatUint(p.Hi, 10) + "-" + strconv.FormatUint(p.Lo, 10)
}

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
