package redisstream

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

// A Redis 7 stream keeps entries-added, the number of entries ever added
// to it. The number of entries after a position is entries-added minus
// the number ever added up to the entry before it (its "entries read", as
// a Redis consumer group calls it). Knowing that number at one ID, the
// number at a later ID is it plus the entries between the two: so a
// position's backlog is counted once, when it is first seen, and from
// then on only the entries a group finished since its last reading are
// counted, each once in its life. Trimming (MAXLEN, MINID) removes entries
// from the front only, which changes none of this; an XDEL in the middle
// of a stream (a tombstone) does, and a stream that has one after the
// counted range is counted directly instead.

// streamFacts is one atomic reading of a stream's counters.
type streamFacts struct {
	missing    bool
	length     int64
	added      int64 // entries-added
	first      transport.Position
	maxDeleted transport.Position // max-deleted-entry-id: the last XDEL
	last       transport.Position // last-generated-id
}

// countRange reads a stream's counters and, in the same call, counts its
// entries in XRANGE's ARGV[1]..ARGV[2], at most ARGV[3] (0: none), and
// returns the last one counted.
var countRange = redis.NewScript(`
local ok, info = pcall(redis.call, 'XINFO', 'STREAM', KEYS[1])
if not ok then return {1} end
local f = {}
for i = 1, #info, 2 do f[info[i]] = info[i + 1] end
if not f['entries-added'] then return {2} end
local first = '0-0'
if type(f['first-entry']) == 'table' then first = f['first-entry'][1] end
local n, last = 0, ''
local want = tonumber(ARGV[3])
if want > 0 then
  local xs = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[2], 'COUNT', want)
  n = #xs
  if n > 0 then last = xs[n][1] end
end
return {0, f['length'], f['entries-added'], first, f['max-deleted-entry-id'], f['last-generated-id'], n, last}`)

// backlogChunk is the most entries one call counts: about 3 ms of Redis
// for 2,000 small entries, so a long count never blocks the server.
const backlogChunk = 2000

// countStep runs countRange once.
func (s *Source) countStep(ctx context.Context, stream, from, until string, want int) (f streamFacts, n int64, last string, err error) {
	res, err := countRange.Run(ctx, s.c, []string{stream}, from, until, want).Slice()
	if err != nil {
		return f, 0, "", fmt.Errorf("redisstream: counting the entries of %s: %w", stream, err)
	}
	if len(res) == 1 {
		if n, _ := res[0].(int64); n == 2 {
			return f, 0, "", fmt.Errorf("redisstream: %s has no entries-added in XINFO STREAM: counting a backlog needs Redis 7.0 or later", stream)
		}
		return streamFacts{missing: true}, 0, "", nil
	}
	if len(res) != 8 {
		return f, 0, "", fmt.Errorf("redisstream: counting the entries of %s: %d values from the script", stream, len(res))
	}
	f.length, _ = res[1].(int64)
	f.added, _ = res[2].(int64)
	for i, dst := range []*transport.Position{&f.first, &f.maxDeleted, &f.last} {
		id, _ := res[3+i].(string)
		if *dst, err = parseID(id); err != nil {
			return f, 0, "", fmt.Errorf("redisstream: counting the entries of %s: %w", stream, err)
		}
	}
	n, _ = res[6].(int64)
	last, _ = res[7].(string)
	return f, n, last, nil
}

// countAfter counts stream's entries after the ID after (all when after is
// zero), a chunk per call, and returns the counters of the call that
// reached the end.
func (s *Source) countAfter(ctx context.Context, stream string, after transport.Position) (n int64, f streamFacts, err error) {
	start := "-"
	if (after != transport.Position{}) {
		start = "(" + formatID(after)
	}
	for {
		f, got, last, err := s.countStep(ctx, stream, start, "+", backlogChunk)
		if err != nil || f.missing {
			return 0, f, err
		}
		n += got
		if got < backlogChunk {
			return n, f, nil
		}
		start = "(" + last
	}
}

// readMark is what is known of a stream at one ID: entries-added minus
// the entries in the stream after it. Trimming leaves it as it is (it
// removes entries before it) and so does adding; an XDEL after it changes
// it, so a mark is kept only while max-deleted-entry-id is at or before
// it: a stream with a tombstone ahead of a group is counted afresh each
// time until the group passes it.
type readMark struct {
	at   transport.Position
	read int64
}

// readMarks keeps a few marks per stream (one per group that asks), so
// that each count starts where the last one ended.
type readMarks struct {
	mu sync.Mutex
	by map[string][]readMark
}

const marksPerStream = 8

// best returns the latest mark at or before at, at or after the stream's
// first entry (so that the entries between it and at are all still
// there), with no XDEL after it.
func (m *readMarks) best(stream string, f streamFacts, at transport.Position) (readMark, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out readMark
	found := false
	for _, k := range m.by[stream] {
		if !k.at.Less(f.maxDeleted) && !k.at.Less(before(f.first)) && !at.Less(k.at) && (!found || out.at.Less(k.at)) {
			out, found = k, true
		}
	}
	return out, found
}

func (m *readMarks) put(stream string, k readMark) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.by == nil {
		m.by = make(map[string][]readMark)
	}
	ks := m.by[stream]
	for i := range ks {
		if ks[i].at == k.at {
			ks[i] = k
			return
		}
	}
	if len(ks) == marksPerStream {
		ks = ks[1:]
	}
	m.by[stream] = append(ks, k)
}

// entriesRead returns a stream's entries-added minus its entries after the
// ID through, and the counters it is relative to: what a Redis consumer
// group whose last-delivered ID is through has as entries-read (its lag
// is the difference).
//
// From a mark at or before through, it counts the entries between the
// two. Without one, it counts the entries after through (the backlog) and,
// in turns with it, those from the stream's first entry up to through
// (entries-added minus the length is what is before the first entry when
// no XDEL left a tombstone in the stream), and takes whichever count ends
// first: a backlog that is short, or a trimmed stream's short head.
func (s *Source) entriesRead(ctx context.Context, stream string, through transport.Position) (read int64, f streamFacts, err error) {
	for attempt := 0; ; attempt++ {
		if f, _, _, err = s.countStep(ctx, stream, "-", "+", 0); err != nil || f.missing {
			return 0, f, err
		}
		switch {
		case !through.Less(f.last) || f.length == 0:
			return f.added, f, nil // no entry after it
		case through.Less(f.first):
			return f.added - f.length, f, nil // every entry is after it
		}
		if attempt == 3 { // trimmed or deleted under every count: count it plainly
			after, end, err := s.countAfter(ctx, stream, through)
			return end.added - after, end, err
		}
		var ok bool
		if mark, found := s.marks.best(stream, f, through); found {
			read, ok, err = s.countFrom(ctx, stream, mark, through)
		} else {
			read, f, ok, err = s.countEither(ctx, stream, f, through)
		}
		if err != nil {
			return 0, f, err
		}
		if ok {
			if !through.Less(f.maxDeleted) {
				s.marks.put(stream, readMark{at: through, read: read})
			}
			return read, f, nil
		}
	}
}

// countFrom returns mark.read plus the entries after mark.at up to
// through (included); ok is false when the stream was trimmed past the
// mark or had an XDEL meanwhile (the count is then not exact).
func (s *Source) countFrom(ctx context.Context, stream string, mark readMark, through transport.Position) (read int64, ok bool, err error) {
	read = mark.read
	start := "(" + formatID(mark.at)
	for mark.at != through {
		f, got, last, err := s.countStep(ctx, stream, start, formatID(through), backlogChunk)
		if err != nil || f.missing {
			return 0, false, err
		}
		if mark.at.Less(before(f.first)) || mark.at.Less(f.maxDeleted) {
			return 0, false, nil
		}
		read += got
		if got < backlogChunk {
			break
		}
		start = "(" + last
	}
	return read, true, nil
}

// countEither counts, a chunk of each in turn, the entries after through
// and, when no tombstone is in the stream, those from its first entry up
// to through, and answers from the first to end; ok is false when the
// stream was trimmed into the counted range or had an XDEL meanwhile.
func (s *Source) countEither(ctx context.Context, stream string, f0 streamFacts, through transport.Position) (read int64, f streamFacts, ok bool, err error) {
	head := f0.maxDeleted.Less(f0.first) // no tombstone: before the first entry is entries-added minus the length
	headStart, tailStart := "-", "("+formatID(through)
	var headN, tailN int64
	for {
		if head {
			f, got, last, err := s.countStep(ctx, stream, headStart, formatID(through), backlogChunk)
			if err != nil || f.missing {
				return 0, f, false, err
			}
			if f.first != f0.first || f.maxDeleted != f0.maxDeleted {
				return 0, f, false, nil
			}
			headN += got
			if got < backlogChunk {
				return f0.added - f0.length + headN, f0, true, nil
			}
			headStart = "(" + last
		}
		f, got, last, err := s.countStep(ctx, stream, tailStart, "+", backlogChunk)
		if err != nil || f.missing {
			return 0, f, false, err
		}
		if through.Less(before(f.first)) || f.maxDeleted != f0.maxDeleted {
			return 0, f, false, nil
		}
		tailN += got
		if got < backlogChunk {
			return f.added - tailN, f, true, nil
		}
		tailStart = "(" + last
	}
}

var _ transport.Counter = (*Source)(nil)

// Backlog counts each stream's entries at or after from[s]: entries-added
// minus the entries read up to the one before it, with no read of the
// backlog itself. The first call for a position counts its backlog once (a
// chunk of 2,000 per script call); later calls count only the entries
// before the new position that the last call had not (see entriesRead).
// An XDEL in a stream makes the next count of it start afresh.
func (s *Source) Backlog(ctx context.Context, from []transport.Position) ([]int64, error) {
	out := make([]int64, len(s.streams))
	for i, st := range s.streams {
		var p transport.Position
		if i < len(from) {
			p = from[i]
		}
		n, err := s.backlog(ctx, st, p)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

// backlog is Backlog of one stream.
func (s *Source) backlog(ctx context.Context, stream string, from transport.Position) (int64, error) {
	if (from == transport.Position{}) {
		f, _, _, err := s.countStep(ctx, stream, "-", "+", 0)
		if err != nil || f.missing {
			return 0, err
		}
		return f.length, nil
	}
	read, f, err := s.entriesRead(ctx, stream, before(from))
	if err != nil || f.missing {
		return 0, err
	}
	return max(f.added-read, 0), nil
}

// setGroupID moves consumer group's last-delivered ID to id with its
// entries-read, so that XINFO GROUPS reports the group's lag (KEDA's
// redis-streams scaler reads it); without a knowable count, with none
// (Redis then estimates it where it can).
func (s *Source) setGroupID(ctx context.Context, stream string, id transport.Position) error {
	args := []any{"XGROUP", "SETID", stream, s.opts.Group, formatID(id)}
	// Without a count (Redis 6 has no entries-added; the count failed),
	// the group still follows the watermark, its lag left to Redis's
	// estimate, as before entries-read was set.
	if read, f, err := s.entriesRead(ctx, stream, id); err == nil && !f.missing {
		args = append(args, "ENTRIESREAD", read)
	}
	err := s.c.Do(ctx, args...).Err()
	if err != nil && strings.Contains(err.Error(), "NOGROUP") {
		args[1] = "CREATE"
		args = append(args, "MKSTREAM")
		err = s.c.Do(ctx, args...).Err()
	}
	if err != nil {
		return fmt.Errorf("redisstream: XGROUP SETID %s %s %s: %w", stream, s.opts.Group, formatID(id), err)
	}
	return nil
}
