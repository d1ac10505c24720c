package partition

import (
	"context"
	"errors"
	"time"
)

// record is what one registration taught this worker.
type record struct {
	n         int64  // interval registered in
	index     int    // index in n
	prevCount int    // count of n-1
	token     string // the registration's token: it proves the index in n+1
}

type result struct {
	token string
	sent  time.Time
	recv  time.Time
	rep   reply
	err   error
}

type pending struct {
	a        Assignment
	m        int64 // the interval of the registration that issued it
	start    time.Time
	deadline time.Time
}

type runner struct {
	l           *Lease
	ctx         context.Context
	results     chan result
	outstanding int

	token   string // current registration's token
	sent    bool   // a call with token has been sent (the next is a retry)
	nextAt  time.Time
	backoff time.Duration
	failing bool

	leaving bool // Leave was called: no more registrations

	gen        string
	hist       []record // ascending n, at most 3, all of gen
	quarantine time.Time
	clock      clockMap
	pend       *pending
	// next is a provisional term (the fenced handoff) that begins once the
	// live term has ended: released by its user, or at its cap.
	next *pending
}

func (r *runner) loop() error {
	l := r.l
	r.nextAt = l.clock.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		now := l.clock.Now()
		// Local expiry first: the deadline is a timer, not an error. A
		// term its user released ends now.
		if t := l.liveTerm(); t != nil && !now.Before(t.localDeadline()) {
			r.expire(t)
		} else if t != nil {
			if why := t.releasedFor(); why != nil {
				l.endTerm(t, why)
			}
		}
		if p := r.next; p != nil && l.liveTerm() == nil {
			r.next = nil
			if now.Before(p.deadline) {
				r.acquire(p.a, p.m, p.deadline, true)
				continue
			}
		}
		if r.leaving && l.liveTerm() == nil {
			return nil
		}
		if p := r.pend; p != nil {
			if !now.Before(p.deadline) {
				r.pend = nil
			} else if !now.Before(p.start) {
				r.pend = nil
				r.acquire(p.a, p.m, p.deadline, false)
				continue
			}
		}
		wake, leave := r.sendBy(), l.leave
		if r.leaving { // nothing more is sent: wake at the term's deadline
			wake, leave = now.Add(time.Hour), nil
		}
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
		case <-l.released:
		case <-leave:
			r.leaving, r.pend, r.next = true, nil, nil
			if t := l.liveTerm(); t != nil {
				r.keep(t, ErrStopped)
			}
		case res := <-r.results:
			r.outstanding--
			if r.leaving {
				continue // an answer after Leave: nothing more is registered or renewed
			}
			if err := r.handle(res); err != nil {
				return err
			}
		case <-timer.C:
			if !r.leaving && !l.clock.Now().Before(r.sendBy()) {
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
	tok := r.token
	if r.sent {
		l.noteRetry()
	}
	r.sent = true
	ctx, ictx := r.ctx, l.opts.Interval
	results := r.results
	at := r.nextAt
	// A worker that knows nothing of the server's clock yet (its first
	// call) cannot aim: the call is a probe, answered with the time and
	// counted nowhere, however late it arrives. Every registration is
	// aimed, so one that arrives after the interval it was aimed at and
	// the next (where the token lookup would find its retry) counts
	// nothing either.
	c := call{token: tok, want: -1, aimed: probe}
	if len(r.clock.samples) > 0 {
		c.aimed = r.clock.server(at) / l.iv
	}
	if len(r.hist) > 0 {
		last := r.hist[len(r.hist)-1]
		c.want, c.prevToken = last.index, last.token
	}
	go func() {
		if l.wait != nil {
			l.wait(l.clock.Host(at))
		}
		sent := l.clock.Now()
		actx, cancel := context.WithTimeout(ctx, ictx)
		defer cancel()
		c.nonce = l.token()
		rep, err := l.st.register(actx, c)
		results <- result{token: tok, sent: sent, recv: l.clock.Now(), rep: rep, err: err}
	}()
	// Retry with the same token if no answer comes in time; a retry whose
	// first attempt ran is answered with that registration.
	r.nextAt = latest(at, l.clock.Now()).Add(r.retryAfter())
}

func (r *runner) handle(res result) error {
	l := r.l
	if r.ctx.Err() == nil {
		// A registration counts once: not again for the answer to a retry
		// of one already handled.
		l.noteCall(res, res.err == nil && res.rep.registered && res.token == r.token)
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
		r.gen, r.hist, r.pend, r.next = rep.gen, nil, nil, nil
		// Leases of an earlier generation end within two intervals of
		// anything the new one answered; hold nothing before then.
		r.quarantine = res.recv.Add(2 * l.opts.Interval)
	}
	r.clock.add(res.sent, res.recv, rep.now)
	if !rep.registered {
		l.noteMiss()
		r.aimAfterMiss(rep, res.recv.Sub(res.sent))
		return nil
	}
	rec := record{n: rep.interval, index: rep.index, prevCount: rep.prevCount, token: r.token}
	r.token, r.sent = l.token(), false
	r.remember(rec)
	r.decide(rec)
	// The next registration goes to this index's slot of the next
	// interval: where it falls no longer decides the index (the script
	// keeps it), only when the next renewal comes.
	r.aim(rec.n+1, rec.index, rec.prevCount)
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
		r.expire(live)
		live = nil
	}
	p1, ok1 := r.find(m - 1)
	p2, ok2 := r.find(m - 2)
	k, rr := p1.index, cur.prevCount
	valid := ok1 && ok2 && k == p2.index && rr == p1.prevCount && k < rr
	var deadline time.Time
	if valid {
		// D = min(next due slot + gap, start of m+2), in server time.
		due := (m+1)*l.iv + l.slot(cur.index, cur.prevCount)
		d := min(due+l.lo, (m+2)*l.iv)
		deadline = r.clock.local(d)
		valid = deadline.After(l.clock.Now())
	}
	if !valid {
		if live != nil {
			r.keep(live, ErrMappingChanged)
		}
		r.pend = nil
		r.next = r.provisional(cur, p1, ok1)
		if r.next != nil && l.liveTerm() == nil {
			p := r.next
			r.next = nil
			r.acquire(p.a, p.m, p.deadline, true)
		}
		return
	}
	r.next = nil
	a := Assignment{Index: k, Replicas: rr, Token: token(m, l.iv)}
	if live != nil && live.a.Index == k && live.a.Replicas == rr {
		live.resume(m, deadline)
		l.emit(traceEvent{kind: traceRenewed, a: live.a, at: l.clock.Host(l.clock.Now()), deadline: l.clock.Host(deadline)})
		return
	}
	if live != nil {
		l.endTerm(live, ErrMappingChanged)
	}
	if p := r.pend; p != nil && p.a.Index == k && p.a.Replicas == rr {
		p.m, p.deadline = m, deadline
		return
	}
	if l.clock.Now().Before(r.quarantine) {
		r.pend = &pending{a: a, m: m, start: r.quarantine, deadline: deadline}
		return
	}
	r.acquire(a, m, deadline, false)
}

// provisional is the term the fenced handoff takes at registration cur in
// m, nil if none: the count changed (count(m-1) differs from count(m-2),
// which is not 0: a group starting has nothing to hand over), the index is
// the one of m-1, and it is in range. It is the term the
// next registration confirms if nothing else changes (two agreeing closed
// intervals), taken an interval early from one closed interval, with the
// deadline an ordinary lease from m would have; its user's ledger fences
// it until every former holder has released what it serves
// (docs/PROTOCOL.md, "The fenced handoff"; lease.pml with FENCE). Only a
// lease whose user fences asks for it. The quarantine after a new
// generation does not hold it back: the ledger fences it from the holders
// of the earlier generation (it knows them, or was lost with the store
// and fences nothing), as lease.pml checks with the lease's store lost
// apart from the ledger's.
func (r *runner) provisional(cur, p1 record, ok1 bool) *pending {
	l := r.l
	m := cur.n
	if !l.fenced.Load() || !ok1 || p1.index != cur.index || cur.prevCount == p1.prevCount || p1.prevCount == 0 || cur.index >= cur.prevCount {
		return nil
	}
	now := l.clock.Now()
	due := (m+1)*l.iv + l.slot(cur.index, cur.prevCount)
	deadline := r.clock.local(min(due+l.lo, (m+2)*l.iv))
	if !deadline.After(now) {
		return nil
	}
	return &pending{a: Assignment{Index: cur.index, Replicas: cur.prevCount, Token: token(m, l.iv)}, m: m, deadline: deadline}
}

// keep stops renewing t, for why, and keeps it to its cap: half a gap
// before the start of m+2 on the server's clock, m being the interval of
// the registration that issued or last renewed it. A lease from m ends by
// then whether renewed or not, and the next mapping's holders start after
// it (docs/PROTOCOL.md, "The lease rule"; partition/model/lease.pml checks
// it), so the worker serves its share until they may, instead of standing
// down at once. It never ends t sooner than its deadline would.
func (r *runner) keep(t *Term, why error) {
	l := r.l
	if l.opts.StandDownAtChange {
		l.endTerm(t, why)
		return
	}
	if t.keptFor() == nil {
		l.log.Info("lease kept to its cap", "index", t.a.Index, "replicas", t.a.Replicas, "why", why)
	}
	t.keepTo(r.clock.local((t.m+2)*l.iv-l.lo/2), why)
	l.emit(traceEvent{kind: traceRenewed, a: t.a, at: l.clock.Host(l.clock.Now()), deadline: l.clock.Host(t.localDeadline())})
}

// expire ends t at its deadline: ErrExpired, or why it was kept to it.
func (r *runner) expire(t *Term) {
	why := ErrExpired
	if kept := t.keptFor(); kept != nil {
		why = kept
	}
	r.l.endTerm(t, why)
}

func (r *runner) acquire(a Assignment, m int64, deadline time.Time, provisional bool) {
	l := r.l
	now := l.clock.Now()
	if !now.Before(deadline) {
		return
	}
	t := newTerm(a, l.clock, now, deadline)
	t.m, t.provisional, t.wake = m, provisional, l.released
	l.setTerm(t, false)
	l.noteAcquired()
	l.log.Info("lease acquired", "index", a.Index, "replicas", a.Replicas, "token", a.Token, "deadline", deadline.Sub(now), "provisional", provisional)
	l.emit(traceEvent{kind: traceAcquired, a: a, at: l.clock.Host(now), deadline: l.clock.Host(deadline)})
}

// aim schedules the next registration at index i's slot of interval n,
// sending so that it arrives at that server instant.
func (r *runner) aim(n int64, i, p int) {
	r.aimAt(n*r.l.iv + r.l.slot(i, p))
}

// aimAfterMiss aims after a call outside the window. With an index it aims
// at its slot: at once when the slot has just passed inside the window,
// else at the next interval's (never twice in one interval). Without one
// (a new worker) it registers as soon as it can: at once inside the
// window (when its call, sent now, should arrive before the window
// closes: the reply's offset plus the round trip it took), else a little
// after the next window opens. (A call that arrives after the window
// anyway is refused and aims again: it costs a round trip. Waiting instead
// for the next window, as it once did past aimEnd, cost a join late in
// the window a third of an interval more: BenchmarkJoinPhaseFigures.)
func (r *runner) aimAfterMiss(rep reply, rtt time.Duration) {
	l := r.l
	n := rep.interval
	if len(r.hist) > 0 {
		last := r.hist[len(r.hist)-1]
		p := last.prevCount
		if last.n == n-1 {
			p = rep.prevCount
		}
		off := l.slot(last.index, p)
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
	if rep.offset >= l.lo && rep.offset+rtt.Microseconds() < l.iv-l.lo {
		r.nextAt = l.clock.Now()
		return
	}
	if rep.offset >= l.lo {
		n++
	}
	r.aimAt(n*l.iv + l.lo + l.rnd.Int64N(l.lo/4+1))
}

func (r *runner) aimAt(x int64) { r.nextAt = r.clock.aim(x) }
