package partition

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
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
	opts  Options
	st    store
	iv    int64 // interval, µs
	lo    int64 // gap, µs
	log   *slog.Logger
	id    uint64
	seq   atomic.Uint64
	runs  atomic.Bool
	rnd   *rand.Rand // used by the Run goroutine only
	clock Clock      // every reading and deadline of the lease is on it
	trace func(traceEvent)
	// wait sleeps until a registration's send time, more precisely than a
	// Go timer (whose wake-ups are late by up to a millisecond when the
	// process is idle); the loop wakes early by waitEarly and hands the rest
	// to it. Nil in simulations on fake time.
	wait func(time.Time)

	mu      sync.Mutex
	term    *Term
	changed chan struct{} // closed and replaced when term or stopped changes
	stopped bool

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
	l.wait = sleepUntil
	return l, nil
}

func newLease(st store, opts Options) *Lease {
	var seed [16]byte
	_, _ = crand.Read(seed[:])
	iv := opts.Interval.Microseconds()
	return &Lease{
		opts:    opts,
		st:      st,
		iv:      iv,
		lo:      gapMicros(iv, gapPPM(opts.Gap)),
		log:     opts.Logger.With("group", opts.Name),
		clock:   opts.Clock,
		id:      binary.LittleEndian.Uint64(seed[:8]),
		rnd:     rand.New(rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:]))),
		changed: make(chan struct{}),
	}
}

// Key is the Redis key that holds all of group name's lease state: a hash
// (see "Keys" in the package doc). Tools read it; nothing but the lease's
// script should write it.
func Key(name string) string { return "{" + name + "}:lease" }

// CountField is the field of Key that counts the registrations of
// interval n (the interval that holds server time n*Interval).
func CountField(n int64) string { return "c:" + strconv.FormatInt(n, 10) }

// Client returns the Redis client the lease registers with: the store of
// the group's other keys (package consumer keeps its checkpoints there).
func (l *Lease) Client() redis.UniversalClient {
	if s, ok := l.st.(*redisStore); ok {
		return s.client
	}
	return nil
}

// Options returns the options in force, defaults filled in.
func (l *Lease) Options() Options { return l.opts }

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
	r := &runner{l: l, ctx: ctx, results: make(chan result, maxOutstanding), token: l.token(), probe: true,
		clock: clockMap{recent: 2 * l.opts.Interval, keep: 8 * l.opts.Interval}}
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

// record is what one registration taught this worker.
type record struct {
	n         int64 // interval registered in
	index     int   // index in n
	prevCount int   // count of n-1
}

type result struct {
	token string
	sent  time.Time
	recv  time.Time
	rep   reply
	err   error
}

// clockMap maps server time to local time. A reply whose request was sent
// at local s carries the server time T, read no earlier than s, so server
// instant x is no earlier than local s + (x - T). Every sample gives such a
// bound, and the latest bound (the request that spent least time in transit)
// is the tightest.
//
// Deadlines use the samples of the last two intervals only, so that drift
// between the two clocks cannot accumulate into them. Aiming uses the
// samples of the last eight: a longer history finds a request closer to the
// fastest transit, so every worker aims with about the same bias and jitter
// is not doubled by the estimate. Aiming is never a safety matter.
type clockMap struct {
	samples []clockSample
	recent  time.Duration // samples used for deadlines
	keep    time.Duration // samples used for aiming
}

type clockSample struct {
	base time.Time // local time of server time 0
	recv time.Time
}

func (m *clockMap) add(sent, recv time.Time, now int64) {
	kept := m.samples[:0]
	for _, x := range m.samples {
		if recv.Sub(x.recv) < m.keep {
			kept = append(kept, x)
		}
	}
	m.samples = append(kept, clockSample{base: sent.Add(-time.Duration(now) * time.Microsecond), recv: recv})
}

func (m *clockMap) reset() { m.samples = m.samples[:0] }

// local returns the earliest local time at which the server's clock can
// read x, from recent samples: the mapping for deadlines.
func (m *clockMap) local(x int64) time.Time {
	return m.best(m.recent).Add(time.Duration(x) * time.Microsecond)
}

// aim returns the local time at which to send so that the fastest request
// would reach the server at x.
func (m *clockMap) aim(x int64) time.Time {
	return m.best(m.keep).Add(time.Duration(x) * time.Microsecond)
}

func (m *clockMap) best(within time.Duration) time.Time {
	newest := m.samples[len(m.samples)-1].recv
	best := m.samples[len(m.samples)-1].base
	for _, s := range m.samples {
		if newest.Sub(s.recv) < within && s.base.After(best) {
			best = s.base
		}
	}
	return best
}

type pending struct {
	a        Assignment
	start    time.Time
	deadline time.Time
}

type runner struct {
	l           *Lease
	ctx         context.Context
	results     chan result
	outstanding int

	token   string // current registration's token
	probe   bool   // the next call only reads the clock and the last count
	nextAt  time.Time
	backoff time.Duration
	failing bool

	gen        string
	hist       []record // ascending n, at most 3, all of gen
	quarantine time.Time
	clock      clockMap
	pend       *pending
}

func (r *runner) loop() error {
	l := r.l
	r.nextAt = l.clock.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		now := l.clock.Now()
		// Local expiry first: the deadline is a timer, not an error.
		if t := l.liveTerm(); t != nil && !now.Before(t.localDeadline()) {
			l.endTerm(t, ErrExpired)
		}
		if p := r.pend; p != nil {
			if !now.Before(p.deadline) {
				r.pend = nil
			} else if !now.Before(p.start) {
				r.pend = nil
				r.acquire(p.a, p.deadline)
				continue
			}
		}
		wake := r.sendBy()
		if t := l.liveTerm(); t != nil {
			wake = earliest(wake, t.localDeadline())
		}
		if r.pend != nil {
			wake = earliest(wake, r.pend.start)
		}
		timer.Reset(time.Until(l.clock.Host(wake)))
		select {
		case <-r.ctx.Done():
			return nil
		case res := <-r.results:
			r.outstanding--
			if err := r.handle(res); err != nil {
				return err
			}
		case <-timer.C:
			if !l.clock.Now().Before(r.sendBy()) {
				r.attempt()
			}
		}
	}
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// sendBy is when the loop starts the next call: early enough for the call's
// goroutine to wait out the rest precisely.
func (r *runner) sendBy() time.Time {
	if r.l.wait == nil {
		return r.nextAt
	}
	return r.nextAt.Add(-waitEarly)
}

func (r *runner) retryAfter() time.Duration {
	return max(time.Duration(r.l.lo)*time.Microsecond/2, 5*time.Millisecond)
}

func (r *runner) attempt() {
	l := r.l
	if r.outstanding >= maxOutstanding {
		r.nextAt = l.clock.Now().Add(r.retryAfter())
		return
	}
	r.outstanding++
	tok, probe := r.token, r.probe
	ctx, ictx := r.ctx, l.opts.Interval
	results := r.results
	at := r.nextAt
	go func() {
		if l.wait != nil {
			l.wait(l.clock.Host(at))
		}
		sent := l.clock.Now()
		actx, cancel := context.WithTimeout(ctx, ictx)
		defer cancel()
		rep, err := l.st.register(actx, tok, l.token(), probe)
		results <- result{token: tok, sent: sent, recv: l.clock.Now(), rep: rep, err: err}
	}()
	// Retry with the same token if no answer comes in time; a retry whose
	// first attempt ran is answered with that registration.
	r.nextAt = latest(at, l.clock.Now()).Add(r.retryAfter())
}

func (r *runner) handle(res result) error {
	l := r.l
	if r.ctx.Err() == nil {
		l.noteCall(res, res.err == nil && res.rep.registered)
	}
	if res.token != r.token {
		return nil // an answer to a registration already handled
	}
	if res.err != nil {
		var se *SettingsError
		if errors.As(res.err, &se) {
			return res.err
		}
		if errors.Is(res.err, ErrInvalidOptions) {
			return res.err
		}
		if r.ctx.Err() != nil {
			return nil
		}
		if !r.failing {
			l.log.Warn("registration failing", "err", res.err)
			r.failing = true
		}
		r.backoff = min(max(2*r.backoff, 5*time.Millisecond), r.retryAfter())
		r.nextAt = res.recv.Add(r.backoff)
		return nil
	}
	if r.failing {
		l.log.Info("registration recovered")
		r.failing = false
	}
	r.backoff = 0
	rep := res.rep
	if rep.gen != r.gen {
		r.clock.reset() // another server, maybe another clock
		if r.gen != "" {
			l.log.Warn("store generation changed", "from", r.gen, "to", rep.gen)
			if t := l.liveTerm(); t != nil {
				l.endTerm(t, ErrGenerationChanged)
			}
		}
		r.gen, r.hist, r.pend = rep.gen, nil, nil
		// Leases of an earlier generation end within two intervals of
		// anything the new one answered; hold nothing before then.
		r.quarantine = res.recv.Add(2 * l.opts.Interval)
	}
	r.clock.add(res.sent, res.recv, rep.now)
	if !rep.registered {
		r.probe = false
		r.aimAfterMiss(rep)
		return nil
	}
	r.token = l.token()
	rec := record{n: rep.interval, index: rep.index, prevCount: rep.prevCount}
	r.remember(rec)
	r.decide(rec)
	if rec.index < rec.prevCount {
		r.aim(rec.n+1, rec.index, rec.prevCount, rec.index+1)
		return nil
	}
	// The count this worker would space itself by is only a floor (a new
	// group, or one that grew): learn the final count of rec.n early in the
	// next interval, before its window opens, and aim then, so that slots
	// keep their order. Probes are spread over the middle half of the
	// leading gap: a fleet that started at once probes at once.
	r.probe = true
	r.aimAt((rec.n+1)*l.iv + l.lo/4 + l.rnd.Int64N(l.lo/2+1))
	return nil
}

func (r *runner) remember(rec record) {
	h := r.hist[:0]
	for _, x := range r.hist {
		if x.n >= rec.n-2 && x.n != rec.n {
			h = append(h, x)
		}
	}
	h = append(h, rec)
	for i := len(h) - 1; i > 0 && h[i].n < h[i-1].n; i-- {
		h[i], h[i-1] = h[i-1], h[i]
	}
	r.hist = h
}

func (r *runner) find(n int64) (record, bool) {
	for _, x := range r.hist {
		if x.n == n {
			return x, true
		}
	}
	return record{}, false
}

// decide applies the lease rule at a registration in m: hold (k, rr) iff
// P(m-1) = P(m-2) = (k, rr), all of one generation.
func (r *runner) decide(cur record) {
	l := r.l
	m := cur.n
	newest := r.hist[len(r.hist)-1].n
	if m != newest {
		return
	}
	live := l.liveTerm()
	if live != nil && !live.Held() {
		l.endTerm(live, ErrExpired)
		live = nil
	}
	p1, ok1 := r.find(m - 1)
	p2, ok2 := r.find(m - 2)
	k, rr := p1.index, cur.prevCount
	valid := ok1 && ok2 && k == p2.index && rr == p1.prevCount && k < rr
	var deadline time.Time
	if valid {
		// D = min(next due slot + gap, start of m+2), in server time.
		due := (m+1)*l.iv + l.slot(cur.index, cur.prevCount, cur.index+1)
		d := min(due+l.lo, (m+2)*l.iv)
		deadline = r.clock.local(d)
		valid = deadline.After(l.clock.Now())
	}
	if !valid {
		if live != nil {
			l.endTerm(live, ErrMappingChanged)
		}
		r.pend = nil
		return
	}
	a := Assignment{Index: k, Replicas: rr, Token: m}
	if live != nil && live.a.Index == k && live.a.Replicas == rr {
		live.renew(deadline)
		l.emit(traceEvent{kind: traceRenewed, a: live.a, at: l.clock.Host(l.clock.Now()), deadline: l.clock.Host(deadline)})
		return
	}
	if live != nil {
		l.endTerm(live, ErrMappingChanged)
	}
	if p := r.pend; p != nil && p.a.Index == k && p.a.Replicas == rr {
		p.deadline = deadline
		return
	}
	if l.clock.Now().Before(r.quarantine) {
		r.pend = &pending{a: a, start: r.quarantine, deadline: deadline}
		return
	}
	r.acquire(a, deadline)
}

func (r *runner) acquire(a Assignment, deadline time.Time) {
	l := r.l
	now := l.clock.Now()
	if !now.Before(deadline) {
		return
	}
	t := newTerm(a, l.clock, now, deadline)
	l.setTerm(t, false)
	l.noteAcquired()
	l.log.Info("lease acquired", "index", a.Index, "replicas", a.Replicas, "token", a.Token, "deadline", deadline.Sub(now))
	l.emit(traceEvent{kind: traceAcquired, a: a, at: l.clock.Host(now), deadline: l.clock.Host(deadline)})
}

// slot is the offset in the next interval at which the holder of index i
// registers, when its registration was the one with index i and saw p as the
// count of the interval before (every worker with an index below p spaces
// itself by p), and c is the final count of its own interval, where known
// (else pass i+1, its floor).
//
// Below p it is the slot (i + 0.5)/p of the window. At or past p (a worker
// that joined, or was pushed there by one that did) it goes after every slot
// spaced by p: into the last half slot, in order of i, spread by c. Spacing
// these by c instead, as the workers before them do not, would put index p
// a fraction of a millisecond after index p-1 and swap them on the next
// jitter.
func (l *Lease) slot(i, p, c int) int64 {
	span := float64(l.aimEnd() - l.lo)
	c = max(c, i+1)
	if p == 0 {
		return l.lo + int64((float64(i)+0.5)/float64(c)*span)
	}
	if i < p {
		return l.lo + int64((float64(i)+0.5)/float64(p)*span)
	}
	frac := (float64(p) - 0.5 + 0.5*float64(i-p+1)/float64(c-p+1)) / float64(p)
	return l.lo + int64(frac*span)
}

// aimEnd is the end of the part of the window that slots are spread over:
// half a gap short of the window's end, so that the last slot of a large
// group is not a fraction of a millisecond from a refusal. A registration
// that arrives after the window is not counted, and a count one short
// remaps the whole group.
func (l *Lease) aimEnd() int64 { return l.iv - l.lo - l.lo/2 }

// aim schedules the next registration at index i's slot of interval n,
// sending so that it arrives at that server instant.
func (r *runner) aim(n int64, i, p, c int) {
	r.aimAt(n*r.l.iv + r.l.slot(i, p, c))
}

// aimAfterMiss aims after a probe or a call outside the window. With an
// index it aims at its slot, spaced by the last final count it knows (the
// one in rep when it registered in the interval before); at once when the
// slot has just passed inside the window; else at the next interval's
// slot. Without one it aims at a random offset in the window: of the
// current interval when enough of it is ahead, else of the next.
func (r *runner) aimAfterMiss(rep reply) {
	l := r.l
	n := rep.interval
	if len(r.hist) > 0 {
		last := r.hist[len(r.hist)-1]
		final := last.index + 1
		if last.n == n-1 {
			final = rep.prevCount
		}
		off := l.slot(last.index, last.prevCount, final)
		if last.n >= n { // never register twice in one interval
			r.aimAt((last.n+1)*l.iv + off)
			return
		}
		switch {
		case rep.offset <= off:
		case rep.offset >= l.lo && rep.offset < l.iv-l.lo:
			r.nextAt = l.clock.Now()
			return
		default:
			n++
		}
		r.aimAt(n*l.iv + off)
		return
	}
	from := max(rep.offset, l.lo)
	to := l.aimEnd()
	if to-from < (to-l.lo)/8 { // too little of this window left
		n++
		from = l.lo
	}
	r.aimAt(n*l.iv + from + l.rnd.Int64N(to-from+1))
}

func (r *runner) aimAt(x int64) { r.nextAt = r.clock.aim(x) }
