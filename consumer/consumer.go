package consumer

import (
	"context"
	"fmt"
	"github.com/redis/go-redis/v9"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/hist"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/presence"
	"github.com/nandi-go/nandi/transport"
)

// Handler handles one task. Its context ends when the lease the task was
// taken under runs out (or at ShutdownTimeout); a handler must return
// promptly then, and must not act on the task after its context has ended.
// A nil error means the task is done; an error marked with Permanent sends
// it to DeadLetter (or skips it) at once; any other error is retried (see
// Options.MaxAttempts). A panic is recovered and is a failed attempt.
//
// A handler's effect has a boundary: the instant it is committed (an SMTP
// server accepted DATA, a transaction committed, an endpoint answered
// 2xx). From then on the handler returns nil: an error from cleanup after
// it (QUIT, Close, a context that ended meanwhile) would have the task
// done again, and its effect repeated.
type Handler func(ctx context.Context, m *transport.Message) error

// Consumer pairs a source with a lease and the filter
// id % Replicas == Index. See the package documentation.
type Consumer struct {
	*shared
	lease  *partition.Lease
	runs   atomic.Bool
	cur    atomic.Pointer[term] // the term being served
	worker string               // the worker id of presence
}

// shared is what every term of a consumer works with and what outlives
// a term: the configuration and the user's code, the counters, the spells
// of trouble, when each task left unfinished was first taken, and the
// newest checkpoint epoch seen. A term holds it, never the Consumer.
type shared struct {
	src      transport.Source
	opts     Options
	user     userCode         // the user's functions, with their policies (usercode.go)
	ledger   checkpoint.Store // nil when there is none (only a log needs one)
	log      *slog.Logger
	interval time.Duration // the lease's
	group    string        // the lease's name

	// fenced: the lease issues provisional terms, which this consumer's
	// ledger fences (a log with checkpoints: the fenced handoff); leaving:
	// Run's context ended and the term is served to its cap (ServeToCap).
	fenced, leaving atomic.Bool

	stats    stats
	drains   hist.H
	handling *hist.H      // handler calls' durations (Options.HandlerBuckets)
	running  atomic.Int64 // calls into user code in progress, overdue ones included
	overdue  atomic.Int64 // of which overdue: detached after their term
	unserved atomic.Bool  // opening for the term held is failing
	lastTrim atomic.Int64 // unix ns of the last trim

	failingTasks                                        atomic.Int64 // tasks whose last attempt failed
	fetching, opening, writing, deadLettering, badShard trouble

	finished unwritten // tasks this worker finished and did not write (repeats.go)

	lastErr atomic.Pointer[lastError]  // the last failed attempt, for presence
	firsts  atomic.Pointer[firstTaken] // when the last term's unfinished tasks were first taken

	pause pauser // the group's pause, as this worker last read it
	// misaligned: the group's aligned subscriptions are misaligned
	// (MisalignedKey, as last read, or found here); misalignedHere: found
	// here and not recorded for the group (the write failed).
	misaligned, misalignedHere atomic.Bool
	client                     redis.UniversalClient          // the lease's: nil when it has none
	logWritten                 atomic.Pointer[checkpoint.Log] // the log last recorded beside the ledger
	workerID                   string                         // Consumer.Worker, for DeadLetter's context

	// presenceNow (capacity 1) asks for a presence record now, not at the
	// next interval: a handover begins, and lasts less than an interval.
	presenceNow chan struct{}

	lastLag   atomic.Pointer[lagReading] // computed each interval (LastLag)
	lagWanted atomic.Bool                // WantLag was called: compute the lag even with NoPresence

	seenMu    sync.Mutex
	seen      int64                // the newest checkpoint epoch seen
	seenStart []transport.Position // its start
}

// New returns a Consumer of src for the holder of lease, handling with h.
// It validates opts (errors wrap ErrInvalidOptions) and does no I/O. The
// Consumer runs the lease itself: do not call lease.Run.
func New(lease *partition.Lease, src transport.Source, h Handler, opts Options) (*Consumer, error) {
	if lease == nil || src == nil || h == nil {
		return nil, fmt.Errorf("%w: lease, source and handler are all required", ErrInvalidOptions)
	}
	opts = opts.withDefaults(lease.Margin(), lease.Interval())
	if err := opts.validate(lease.Margin(), lease.Interval()); err != nil {
		return nil, err
	}
	sh := &shared{src: src, opts: opts, log: opts.Logger.With("group", lease.Name()), interval: lease.Interval(), group: lease.Name(), ledger: opts.Checkpoints,
		presenceNow: make(chan struct{}, 1)}
	sh.handling = hist.New(opts.HandlerBuckets)
	sh.client = lease.Client()
	if sh.ledger == nil && sh.client != nil {
		sh.ledger = checkpoint.NewRedis(sh.client, lease.Name())
	}
	sh.wrap(h)
	c := &Consumer{shared: sh, lease: lease, worker: opts.WorkerID}
	if c.worker == "" {
		c.worker = presence.NewWorkerID()
	}
	sh.workerID = c.worker
	return c, nil
}

// Worker returns the worker id the consumer's presence record carries
// (Options.WorkerID, or host:pid with #n for the n-th in a process).
func (c *Consumer) Worker() string { return c.worker }

// Checkpoints returns the store of the consumer's checkpoints (nil when
// there is none): Options.Checkpoints, else the ledger beside the lease.
// Give it to a sink that keeps a watermark (pgsink.Options.Checkpoints),
// or read the group's marks from it in a tool.
func (c *Consumer) Checkpoints() checkpoint.Store { return c.ledger }

// Lease returns the lease the consumer runs.
func (c *Consumer) Lease() *partition.Lease { return c.lease }

// Source returns the source the consumer reads.
func (c *Consumer) Source() transport.Source { return c.src }

// Positions returns, for a log, the position per shard below which every
// task of the index held now is done (what the next checkpoint would
// write), and the assignment they belong to; ok is false when nothing is
// being served or the source is not a log. A shard the term does not read
// (an aligned log's shard where the index can own nothing) is done
// everywhere: its position is the largest there is. With the log's ends
// (Source.Info) it gives the lag per shard.
func (c *Consumer) Positions() (a partition.Assignment, pos []transport.Position, ok bool) {
	tr := c.cur.Load()
	if tr == nil || !tr.info.Log {
		return a, nil, false
	}
	if tr.shards == nil {
		return a, nil, false
	}
	pos = make([]transport.Position, len(tr.shards))
	tr.r.view(func(*book) {
		for i, sh := range tr.shards {
			pos[i] = everywhere
			if sh != nil {
				pos[i] = sh.watermark()
			}
		}
	})
	return tr.a, pos, true
}

// everywhere is the largest position: below it, everything.
var everywhere = transport.Position{Hi: ^uint64(0), Lo: ^uint64(0)}

// Reading returns the shards the term served now reads, ascending (every
// shard, unless the log is aligned; nil when nothing is served).
func (c *Consumer) Reading() []int {
	read, _ := c.reading()
	return read
}

// reading is Reading and the number of shards of the source served.
func (c *Consumer) reading() (read []int, of int) {
	tr := c.cur.Load()
	if tr == nil {
		return nil, 0
	}
	for s, sh := range tr.shards {
		if sh != nil {
			read = append(read, s)
		}
	}
	return read, len(tr.shards)
}
