package partition

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxOutstanding bounds the registration calls in flight at once. A call
// that hangs inside the client is abandoned, not waited for; this keeps a
// client without timeouts from piling them up.
const maxOutstanding = 3

// A Lease registers this worker in its group once per interval and holds an
// exclusive, self-expiring share of the work whenever the last two closed
// intervals agree on it. Create it with New, run it with Run, and read it
// with Current, Next or Term.
type Lease struct {
	opts   Options
	client redis.UniversalClient // nil in simulations
	st     store
	iv     int64 // interval, µs
	lo     int64 // gap, µs
	log    *slog.Logger
	id     uint64
	seq    atomic.Uint64
	runs   atomic.Bool
	rnd    *rand.Rand // used by the Run goroutine only
	clock  Clock      // every reading and deadline of the lease is on it
	trace  func(traceEvent)
	// wait sleeps until a registration's send time, more precisely than a
	// Go timer (whose wake-ups are late by up to a millisecond when the
	// process is idle); the loop wakes early by waitEarly and hands the rest
	// to it. Nil in simulations on fake time.
	wait func(time.Time)

	mu      sync.Mutex
	term    *Term
	changed chan struct{} // closed and replaced when term or stopped changes
	stopped bool

	leave     chan struct{} // closed by Leave
	leaveOnce sync.Once

	// fenced: the lease's user fences its terms through a ledger, so the
	// lease issues provisional terms at a change of count
	// (FenceHandoffs); released wakes the runner when a term's user
	// released it (Term.Release).
	fenced   atomic.Bool
	released chan struct{}

	stats leaseStats
}

// New returns a Lease for the group opts.Name on client. It validates opts
// (errors wrap ErrInvalidOptions) and does no I/O. The client is never
// closed by the Lease.
func New(client redis.UniversalClient, opts Options) (*Lease, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: client is nil", ErrInvalidOptions)
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.WaitReplicas > 0 {
		switch client.(type) {
		case *redis.Client, *redis.ClusterClient:
		default:
			return nil, fmt.Errorf("%w: WaitReplicas needs a *redis.Client (also Sentinel) or *redis.ClusterClient, got %T", ErrInvalidOptions, client)
		}
	}
	iv := opts.Interval.Microseconds()
	ppm := gapPPM(opts.Gap)
	st := &redisStore{
		client:   client,
		key:      Key(opts.Name),
		settings: []any{iv, ppm},
		wait:     opts.WaitReplicas,
		waitTime: opts.WaitTimeout,
		name:     opts.Name,
		interval: opts.Interval,
		gap:      opts.Gap,
	}
	l := newLease(st, opts)
	l.client, l.wait = client, sleepUntil
	return l, nil
}

func newLease(st store, opts Options) *Lease {
	var seed [16]byte
	_, _ = crand.Read(seed[:])
	iv := opts.Interval.Microseconds()
	return &Lease{
		opts:     opts,
		st:       st,
		iv:       iv,
		lo:       gapMicros(iv, gapPPM(opts.Gap)),
		log:      opts.Logger.With("group", opts.Name),
		clock:    opts.Clock,
		id:       binary.LittleEndian.Uint64(seed[:8]),
		rnd:      rand.New(rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:]))),
		changed:  make(chan struct{}),
		leave:    make(chan struct{}),
		released: make(chan struct{}, 1),
	}
}

// Leave makes the worker leave the group cleanly while Run runs: it
// registers no more, keeps the term it holds to its cap (half a gap before
// the group's next mapping may start, as at a change of mapping: at most
// two intervals away), where the term ends with ErrStopped, and then Run
// returns nil. With no term held Run returns at once. The group counts the
// worker until its last registration's interval closes, so its share is
// served until the next mapping's holders may start, not an interval
// less. Calling it again does nothing; cancelling Run's context still
// ends everything at once.
func (l *Lease) Leave() { l.leaveOnce.Do(func() { close(l.leave) }) }

// Key is the Redis key that holds all of group name's lease state: a hash
// (see "Keys" in the package doc). Tools read it; nothing but the lease's
// script should write it.
func Key(name string) string { return KeyPrefix(name) + "lease" }

// KeyPrefix is what every key of group name begins with, "{name}:": the
// Redis Cluster hash tag that keeps the group's keys (the lease's, the
// checkpoint ledger's, the presence records') on one node.
func KeyPrefix(name string) string { return "{" + name + "}:" }

// Margin is Gap*Interval as the registration script computes it, in whole
// microseconds: the slack at each end of an interval, the margin a lease
// holds past its next due registration, and the default time every task
// has before its lease can run out (consumer.Options.MinTaskTime).
func Margin(interval time.Duration, gap float64) time.Duration {
	return time.Duration(gapMicros(interval.Microseconds(), gapPPM(gap))) * time.Microsecond
}

// CountField is the field of Key that counts the registrations of
// interval n (the interval that holds server time n*Interval).
func CountField(n int64) string { return "c:" + strconv.FormatInt(n, 10) }

// Client returns the Redis client New was given: the store of the group's
// other keys (package consumer keeps its checkpoints and presence records
// there, under KeyPrefix).
func (l *Lease) Client() redis.UniversalClient { return l.client }

// Options returns the options in force, defaults filled in.
func (l *Lease) Options() Options { return l.opts }

// Name is the group's name (Options.Name).
func (l *Lease) Name() string { return l.opts.Name }

// Interval is the lease interval (Options.Interval).
func (l *Lease) Interval() time.Duration { return l.opts.Interval }

// Margin is Gap*Interval exactly as the registration script computes it
// (see the function Margin).
func (l *Lease) Margin() time.Duration { return time.Duration(l.lo) * time.Microsecond }

// Current returns what is held at this instant, checked against the
// monotonic clock when it is called.
func (l *Lease) Current() (Assignment, bool) {
	t := l.Term()
	if t == nil || !t.Held() {
		return Assignment{}, false
	}
	return t.a, true
}

// Term returns the live term, or nil when nothing is held. A term it
// returns may end at any moment: watch its Done.
func (l *Lease) Term() *Term {
	l.mu.Lock()
	t := l.term
	l.mu.Unlock()
	if t == nil || !t.Held() {
		return nil
	}
	return t
}

// Next waits until a term is held and returns it (at once when one is).
// It returns ctx's error when ctx ends first, and ErrStopped once Run has
// returned.
func (l *Lease) Next(ctx context.Context) (*Term, error) {
	for {
		l.mu.Lock()
		t, ch, stopped := l.term, l.changed, l.stopped
		l.mu.Unlock()
		if t != nil && t.Held() {
			return t, nil
		}
		if stopped {
			return nil, ErrStopped
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		}
	}
}

// Changed returns a channel that is closed at the next change of the live
// term (acquired or ended) or when Run returns. Renewals do not close it;
// see Term.Renewed.
func (l *Lease) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

func (l *Lease) setTerm(t *Term, stopped bool) {
	l.mu.Lock()
	l.term = t
	l.stopped = l.stopped || stopped
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

// Run registers the worker once per interval and issues, renews and ends
// terms, until ctx ends. It then ends the live term with ErrStopped and
// returns nil. It returns an error wrapping ErrSettingsMismatch, without
// ever holding, when the group runs with other settings. Run may be called
// once.
//
// Run returns promptly when ctx ends even while a registration hangs inside
// the client: such a call is abandoned and returns when the client's own
// timeouts fire (go-redis ReadTimeout, 3s by default) or the client is
// closed.
func (l *Lease) Run(ctx context.Context) error {
	if !l.runs.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	r := &runner{l: l, ctx: ctx, results: make(chan result, maxOutstanding), token: l.token(),
		clock: clockMap{recent: 2 * l.opts.Interval, keep: 8 * l.opts.Interval, tolerance: time.Duration(l.lo/8) * time.Microsecond}}
	l.noteRun(true)
	err := r.loop()
	if t := l.liveTerm(); t != nil {
		l.endTerm(t, ErrStopped)
	}
	l.noteRun(false)
	l.setTerm(nil, true)
	return err
}

func (l *Lease) liveTerm() *Term {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.term
}

func (l *Lease) endTerm(t *Term, why error) {
	if t.end(why) {
		l.noteEnded(t, why)
		l.setTerm(nil, false)
		l.log.Info("lease lost", "index", t.a.Index, "replicas", t.a.Replicas, "token", t.a.Token, "reason", why)
		l.emit(traceEvent{kind: traceLost, a: t.a, at: l.clock.Host(l.clock.Now()), err: why})
	}
}

func (l *Lease) token() string {
	return strconv.FormatUint(l.id, 36) + "." + strconv.FormatUint(l.seq.Add(1), 36)
}

// traceEvent lets tests record every holding exactly.
type traceEvent struct {
	kind     int
	a        Assignment
	at       time.Time
	deadline time.Time
	err      error
}

const (
	traceAcquired = iota
	traceRenewed
	traceLost
)

func (l *Lease) emit(ev traceEvent) {
	if l.trace != nil {
		l.trace(ev)
	}
}

// FenceHandoffs makes the lease issue provisional terms at a change of the
// group's count (the fenced handoff, docs/PROTOCOL.md): a term that begins
// before the former holders' terms have ended, which its user must fence
// through a ledger that refuses it until they released their shares.
// Package consumer calls it for a log with checkpoints (unless
// consumer.Options.NoFencedHandoff); a lease whose user does not fence
// must never issue them. Call it before Run.
func (l *Lease) FenceHandoffs() { l.fenced.Store(true) }
