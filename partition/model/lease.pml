/*
 * The lease of package partition as a Promela model, checked by spin.
 *
 * It mirrors partition/register.lua (the registration script, "lua:" in
 * the comments below) and partition/runner.go with clockmap.go (the lease
 * rule and the worker's loop, "go:"), quoting the line each construct
 * stands for. make model checks it, and each seeded bug below, through
 * partition/model/model_test.go.
 *
 * Time is discrete: a tick is the gap lo, an interval I ticks (I = 5: a
 * gap of 0.2, the largest allowed; make chaos also runs I = 8, the default
 * 0.125), so the window where registrations count is o in [LO, I-LO], and
 * slots spread over it as a large group's do (SLOT below). Real time is `now`; every
 * worker's clock runs at its rate (the documented drift, well under g/4,
 * is below a tick: see "What the model does not check" in
 * docs/PROTOCOL.md). The server's clock is real time plus `skew`, which
 * steps forward by a tick (lo, the most the protocol allows at once) or
 * back (the script's clamp then holds it), and each worker maps server
 * time to its own through the samples of its replies, as clockmap.go does.
 *
 * A lease is kept through a change of mapping: a registration that
 * disagrees with the lease (the last two closed intervals no longer give
 * its index and count) does not end it, it stops renewing it and keeps it
 * to its cap, half a gap before M+2 begins on the server's clock, M being
 * the interval of the registration that issued or last renewed it (keep).
 * So does a worker that leaves cleanly. The worker serves its share until
 * the new mapping's holders may start, instead of an interval less.
 *
 * What happens, nondeterministically, within a budget of EVENTS faults
 * and membership changes: a worker joins, is killed -9 (it stops
 * registering; a process that is gone does no work), leaves cleanly
 * (SIGTERM: it stops registering and serves its lease to its cap, then
 * exits), restarts with no memory (a kill then a join), is paused
 * (SIGSTOP: its lease counts to its deadline, as the process would act
 * when it wakes) and resumed; a request is delayed by up to DMAX ticks
 * (and the worker retries with the same token meanwhile), or lost, or runs
 * with its reply lost; the store restarts empty (a new generation, the
 * clamp lost); the server's clock steps. In every tick the workers that
 * call are taken in every order.
 *
 * Properties, asserted every tick:
 *  exclusive: every live lease (an alive worker's, before its deadline)
 *    has the same r, and no two the same index;
 *  expires: a lease taken or renewed at a registration in m ends, on the
 *    server's clock, by half a gap before m+2 begins, kept or not (the
 *    step the argument for exclusivity rests on, with the slack the clock
 *    assumptions spend);
 *  complete: Q intervals after the last event, every running worker
 *    holds a lease, on 0..n-1 of n running workers.
 *
 * Seeded bugs, each under a define, must be refused by the same checks:
 *  BUG_OPEN  the lease taken from the open interval M: its index and its
 *            count so far, instead of those of M-1
 *  BUG_ONE   a lease from one closed interval instead of two agreeing
 *  BUG_KEEP  the script keeps an index without checking it is free in N
 *  BUG_LATE  the deadline one gap late
 *  BUG_AIM   the script counts a request however late it arrives
 *  BUG_QUAR  no quarantine after a new generation
 *  BUG_TRUST the script keeps the wanted index on the worker's word: no
 *            proof, no check that it is free
 *  BUG_CAP=n a lease kept n ticks past its cap (refused at n = 3 by
 *            exclusive; at 1 and 2, a tick past the start of M+2, not within
 *            2 events: the half gap before it is slack for the clocks)
 *  BUG_CAPM  the cap counted from the registration that disagrees, not
 *            from the one that issued or last renewed the lease
 * BUG_OPEN, BUG_ONE, BUG_LATE, BUG_TRUST, BUG_CAP=3 and BUG_CAPM must be
 * refused. BUG_KEEP
 * cannot be: keeping needs the proof token, and an index granted under
 * that token in N-1 is free in N (placement skips N-1's indexes, and one
 * token asks once), which the real model asserts as kept-free; the
 * script's check is defense in depth. BUG_AIM and BUG_QUAR are not refused
 * within the bounds checked (their guards matter for liveness and for
 * larger clock errors than a tick). model_test.go says what each run expects.
 */

#ifndef W
#define W 3            /* workers */
#endif
#ifndef I
#define I 5            /* ticks per interval: a gap of 0.2 (MaxGap); make chaos runs 8 (0.125, the default) */
#endif
#define LO 1           /* the gap lo, in ticks */
#ifndef NINT
#define NINT 8         /* intervals modeled */
#endif
#define T (NINT * I)   /* ticks modeled */
#define R 3            /* intervals the server keeps: N, N-1, N-2 */
#define X (4 * W + 1)  /* indexes 1..X-1 can be granted (assert: the bound is enough) */
#ifndef SEQ
#define SEQ (EVENTS + 6) /* token ids per worker: those in the R intervals kept (one per
                          registration, a restart's too), the current, one in the network, a new one */
#endif
#define TOK (W * SEQ)
#ifndef DMAX
#define DMAX (I + 2)   /* a delayed request runs up to DMAX ticks late */
#endif
#ifndef EVENTS
#define EVENTS 3       /* faults and membership changes, in all */
#endif
#ifndef Q
#define Q 5            /* intervals after the last event to full assignment */
#endif
/* go: slot.go's slot(iv, lo, i, p): (i + 0.5) spacings after the window
   opens, the spacing the span to aimEnd over max(p, i+1). The model leaves
   out the 1ms cap on the spacing, so its slots spread over the window as a
   large group's do: where a registration lands decides its renewal, and
   late slots test the deadline's cap at the start of M+2. */
#define SLOTN(i, p) ((p) > (i) + 1 -> (p) : (i) + 1)
#define SLOT(i, p) (LO + ((2 * (i) + 1) * (2 * I - 5 * LO)) / (4 * SLOTN(i, p)))
#define NONE 255
#define PROBE 254      /* go: `c := call{token: tok, want: -1, aimed: probe}` */

byte now;              /* real time, ticks; every worker's local clock */
short skew;            /* the server's raw clock minus real time */
byte tmax;             /* lua: `tmax_us`, the clamp */
byte srv;              /* lua: `T`, the server's clamped time this tick */
byte topN;             /* the newest interval whose ring slot is ready */
bool fresh;            /* the store was just lost: its ring is empty */
byte gen;              /* lua: the generation (nonce, run_id, replid) */
byte events;
byte did;               /* SCENARIO: the changes done */
byte quiet;            /* the tick of the last event */

/* The server: the group's hash, a ring of R intervals by N % R. */
byte cnt[R];           /* lua: `c:N` */
byte ff[R];            /* lua: `f:N`, no index below it is free for a newcomer */
byte granted[R * X];   /* lua: `i:N:INDEX` -> token+1 (0: nobody) */
byte tokIdx[R * TOK];  /* lua: `t:N:TOKEN` -> INDEX (0: none) */

#define slot(n) ((n) % R)
#define G(n, x) granted[slot(n) * X + (x)]
#define TK(n, t) tokIdx[slot(n) * TOK + (t)]
#define C(n) cnt[slot(n)]

/* The workers (go: runner). */
bool alive[W];
bool paused[W];
bool probed[W];        /* go: `len(r.clock.samples) > 0` */
byte wgen[W];          /* go: `r.gen` (NONE: "") */
short bsk[W];          /* go: clockMap: server time minus local, min(T - sent) over samples */
bool hasSk[W];
short quar[W];         /* go: `r.quarantine` */
/* go: `r.hist`: the records of intervals n, by n % R */
bool hasRec[W * R];
byte recN[W * R];
byte recIdx[W * R];    /* 1-based */
byte recPC[W * R];
byte recTok[W * R];
byte newest[W];
#define RI(w, n) ((w) * R + slot(n))
#define REC(w, n) (hasRec[RI(w, n)] && recN[RI(w, n)] == (n))
/* the term: go: `l.liveTerm()` */
bool holds[W];
byte hk[W];            /* Assignment.Index */
byte hr[W];            /* Assignment.Replicas */
short hdl[W];          /* its local deadline */
byte hM[W];            /* the interval of the registration that issued or last renewed it */
bool retiring[W];      /* it left cleanly: registers no more, serves its lease to its cap */
/* go: `r.pend`: a lease waiting out the quarantine */
bool pend[W];
byte pk[W];
byte pr[W];
short pdl[W];
byte pM[W];
/* the registration: go: `r.token`, `r.nextAt` */
byte tok[W];
bool calling[W];       /* tok was sent and not answered */
short nextDue[W];      /* go: `r.nextAt` */
byte cAim[W];          /* go: `c.aimed` */
byte cWant[W];         /* go: `c.want` (NONE: -1) */
byte cProof[W];        /* go: `c.prevToken` (NONE: "") */
/* a request still in the network, run at lateAt */
bool late[W];
byte lateAt[W];
byte lTok[W];
byte lAim[W];
byte lWant[W];
byte lProof[W];
byte lSent[W];

bool act[W];

#ifdef FENCE
/* The fenced handoff (docs/PROTOCOL.md, "The fenced handoff"): a worker
   whose registration shows the count changed takes the new mapping at
   once, from one closed interval, as a provisional term that serves only
   once the ledger lets it: when every holder of the ledger's current
   epoch has released it (final marks and release in one script call) and
   that epoch is fenceable (every term serving it opened it). The lease
   is otherwise unchanged: a provisional term is confirmed by the next
   registration (two agreeing closed intervals: an ordinary lease) or kept
   to its cap and released. The ledger is abstract here: its epochs as
   their replicas, and per index the newest opener that has not released
   (checkpoint/model checks marks and skips). */
bool prov[W];          /* go: Term.Provisional(): fenced by the ledger, not by time */
bool fv[W];            /* go: `r.next`: a provisional term to begin once the live one ends */
byte fk[W];
byte fr[W];
short fdl[W];
byte fM[W];
byte tT[W];            /* the term's fencing token: the interval it began in, plus 1 */
bool opened[W];        /* go: the consumer's term opened the ledger: it serves */
bool stale[W];         /* its open was refused for good (stale, or fenced by a newer opener) */
bool kept[W];          /* the term is kept to its cap: the consumer drains it and releases */
byte lr;               /* lua (checkpoint): `cur`'s replicas; 0: no ledger */
byte lt;               /* the token that created `cur` */
bool lfence;           /* every term serving `cur` opened it: not created after a loss */
byte otk[X];           /* per index of `cur`: the token of its newest opener not released; 0: none */
#define SERVES(w) (alive[w] && holds[w] && now < hdl[w] && opened[w])
#endif

/* One execution of the script, and its reply. */
bool rOK;              /* "ok" (else "time") */
byte rN;
byte rIdx;             /* 1-based */
byte rPC;              /* lua: `count(n - 1)` */
byte rOpen;            /* the count of N so far (BUG_OPEN reads it) */
byte rO;
byte rGen;
byte rSrv;
byte rSent;
byte rTok;


#ifdef DEBUG
#define trace(x) printf x
#else
#define trace(x) skip
#endif

/* go: `l.token()`: a new random token, so unlike any other. The model
   gives worker w the first of its SEQ ids that is in none of the intervals
   the server keeps, nor in a request still in the network (as its token or
   its proof), nor in the worker's records (asserting there is one: else
   SEQ is too small for the run, which is not a finding). */
inline newToken(w) {
	j = 0;
	do
	:: j < SEQ ->
		t2 = w * SEQ + j;
		used = (t2 == tok[w] || (late[w] && (lTok[w] == t2 || lProof[w] == t2)) || (calling[w] && cProof[w] == t2));
		for (x : 0 .. R - 1) { used = used || (hasRec[w * R + x] && recTok[w * R + x] == t2) }
		for (x : 0 .. R * X - 1) { used = used || granted[x] == t2 + 1 }
		for (x : 0 .. R - 1) { used = used || tokIdx[x * TOK + t2] != 0 }
		if
		:: used -> j++
		:: else -> break
		fi
	:: else -> break
	od;
	assert(j < SEQ);
	tok[w] = t2
}

/* Forget what no longer matters (the model's own bookkeeping, so that
   states that differ only in dead values are one state). */
inline canon() {
	rOK = false; rN = 0; rIdx = 0; rPC = 0; rOpen = 0; rO = 0; rGen = 0; rSrv = 0; rSent = 0; rTok = 0;
	N = 0; f = 0; m = 0; t2 = 0; used = false; k = 0; rr = 0; d = 0; valid = false; n = 0; a = 0; b = 0; steps = 0;
	if :: now > quiet + Q * I -> quiet = 0 :: else -> skip fi;
	for (w : 0 .. W - 1) {
		if :: holds[w] && now >= hdl[w] -> holds[w] = false :: else -> skip fi;
		if :: retiring[w] && !holds[w] -> alive[w] = false; retiring[w] = false :: else -> skip fi;   /* its lease over, it exits */
		if :: !holds[w] -> hk[w] = 0; hr[w] = 0; hdl[w] = 0; hM[w] = 0 :: else -> skip fi;
#ifdef FENCE
		if :: !holds[w] -> prov[w] = false; tT[w] = 0; opened[w] = false; stale[w] = false; kept[w] = false :: else -> skip fi;
		if :: fv[w] && now >= fdl[w] -> fv[w] = false :: else -> skip fi;
		if :: !fv[w] -> fk[w] = 0; fr[w] = 0; fdl[w] = 0; fM[w] = 0 :: else -> skip fi;
#endif
		if :: pend[w] && now >= pdl[w] -> pend[w] = false :: else -> skip fi;
		if :: !pend[w] -> pk[w] = 0; pr[w] = 0; pdl[w] = 0; pM[w] = 0 :: else -> skip fi;
		if :: now >= quar[w] -> quar[w] = 0 :: else -> skip fi;
		if :: !late[w] -> lateAt[w] = 0; lTok[w] = 0; lAim[w] = 0; lWant[w] = 0; lProof[w] = 0; lSent[w] = 0 :: else -> skip fi;
		if :: !calling[w] -> cAim[w] = 0; cWant[w] = 0; cProof[w] = 0 :: else -> skip fi;
		if :: !hasSk[w] -> bsk[w] = 0 :: else -> skip fi;
		if
		:: !alive[w] ->
			paused[w] = false; probed[w] = false; hasSk[w] = false; bsk[w] = 0; wgen[w] = 0; calling[w] = false; nextDue[w] = 0;
			for (j : 0 .. R - 1) { hasRec[w * R + j] = false }
			newest[w] = NONE
		:: else -> skip
		fi;
		for (j : 0 .. R - 1) {
			if
			:: hasRec[w * R + j] && (newest[w] == NONE || recN[w * R + j] + 2 < newest[w]) -> hasRec[w * R + j] = false
			:: else -> skip
			fi;
			if :: !hasRec[w * R + j] -> recN[w * R + j] = 0; recIdx[w * R + j] = 0; recPC[w * R + j] = 0; recTok[w * R + j] = 0 :: else -> skip fi
		}
	}
	w = 0; j = 0; x = 0
}

/* lua: register.lua, for a request (tk, aim, want, proof) */
inline execute(tk, aim, want, proof) {
	N = srv / I;                          /* lua: `local N = math.floor(T / I)` */
	rO = srv % I;                         /* lua: `local o = T - N * I` */
	rGen = gen;
	rSrv = srv;
	rTok = tk;
	rOK = false;
	rN = N;
	if
	:: aim == PROBE -> skip               /* lua: `if ARGV[5] == '-1' then return idle()` */
	:: else ->
		/* lua: `local idx = redis.call('HGET', key, 't:' .. fmt(N) .. ':' .. tok)` */
		if
		:: TK(N, tk) != 0 -> rOK = true; rIdx = TK(N, tk)
		:: else ->
			if
			:: N > 0 && TK(N - 1, tk) != 0 -> rOK = true; rN = N - 1; rIdx = TK(N - 1, tk)
			:: else -> skip
			fi
		fi;
		if
		:: rOK -> skip
		:: else ->
			if
			:: rO < LO || rO > I - LO -> skip            /* lua: `if o < lo or o > I - lo then return idle()` */
#ifndef BUG_AIM
			:: N > aim + 1 -> skip                       /* lua: `if aimed > 0 and N > aimed + 1 then return idle()` */
#endif
			:: else ->
				C(N)++;                                  /* lua: `HINCRBY c:N 1` */
				f = 0;
				/* kept-free: an index granted in N-1 under the proof is never
				   already granted in N, so the script's check that it is free
				   never decides (BUG_KEEP leaves it out, and nothing changes) */
#ifndef BUG_TRUST
				/* (it rests on the proof: BUG_TRUST, which drops the proof, is
				   left to the properties) */
				assert(!(want != NONE && N > 0 && want + 1 <= C(N - 1) && proof != NONE &&
				         G(N - 1, want + 1) == proof + 1 && G(N, want + 1) != 0));
#endif
				if
				/* lua: `want >= 1 and want <= count(N - 1) and not granted(N, want)
				         and HGET i:N-1:want == ARGV[7]` */
				:: want != NONE && N > 0 && want + 1 <= C(N - 1) &&
#if !defined(BUG_KEEP) && !defined(BUG_TRUST)
				   G(N, want + 1) == 0 &&
#endif
#ifndef BUG_TRUST
				   proof != NONE && G(N - 1, want + 1) == proof + 1 &&
#endif
				   true -> f = want + 1
				:: else ->
					/* lua: `local f = HGET f:N or 1; while granted(N, f) or granted(N - 1, f) do f = f + 1 end` */
					f = (ff[slot(N)] == 0 -> 1 : ff[slot(N)]);
					do
					:: f < X && (G(N, f) != 0 || (N > 0 && G(N - 1, f) != 0)) -> f++
					:: else -> break
					od;
					assert(f < X);
					ff[slot(N)] = f + 1              /* lua: `HSET f:N f+1` */
				fi;
				G(N, f) = tk + 1;                        /* lua: `i:N:idx = tok` */
				TK(N, tk) = f;                           /* lua: `t:N:tok = idx` */
				rOK = true; rIdx = f
			fi
		fi
	fi;
	rPC = (rN > 0 -> C(rN - 1) : 0);                 /* lua: `count(n - 1)` */
	trace(("   ran: ok=%d n=%d o=%d index=%d count(n-1)=%d\n", rOK, rN, rO, rIdx, rPC));
	rOpen = C(rN)
}

/* A live lease the worker will not renew (a registration that disagrees,
   or it left cleanly) is kept to its cap: half a gap before M+2 begins, on
   the server's clock, M being the interval of the registration that issued
   or last renewed it (hM). A lease is never cut short by it, only
   lengthened: the worker serves its share until the new mapping's holders
   may start, instead of standing down an interval before them. */
inline keep(w, from) {
	d = (from + 2) * I - (LO + 1) / 2;
	/* expires, for a kept lease too: counted from the interval that issued
	   or last renewed it */
	assert(2 * d <= 2 * (hM[w] + 2) * I - LO);
#ifdef BUG_CAP
	d = d + BUG_CAP;                                 /* kept BUG_CAP ticks past its cap */
#endif
	d = d - bsk[w];
	if :: d > hdl[w] -> hdl[w] = d :: else -> skip fi;
#ifdef FENCE
	kept[w] = true
#else
	skip
#endif
}

#ifdef FENCE
/* a term begins (go: `l.setTerm`): its token the interval it began in */
inline newTerm(w, from, p) {
	prov[w] = p; tT[w] = from + 1; opened[w] = false; stale[w] = false; kept[w] = false
}

/* lua (checkpoint/open.lua): a term's open. Of the current epoch's
   replicas: join it, unless a newer opener has its index (fenced), and a
   provisional term only where the index's last opener released. Of other
   replicas: refused (stale) if a newer token created the current epoch;
   else an ordinary term creates the next epoch (its lease's timing: no
   term of another mapping serves), a provisional one only when the
   current epoch is fenceable and every index of it released (else it
   waits: "held", and tries again). */
inline open(w) {
	if
	:: lr == hr[w] && otk[hk[w]] > tT[w] -> stale[w] = true
#ifndef BUG_PJOIN
	:: lr == hr[w] && prov[w] && otk[hk[w]] != 0 && otk[hk[w]] != tT[w] -> skip   /* held */
	:: lr == hr[w] && !(otk[hk[w]] > tT[w]) && !(prov[w] && otk[hk[w]] != 0 && otk[hk[w]] != tT[w]) ->
#else
	:: lr == hr[w] && !(otk[hk[w]] > tT[w]) ->
#endif
		otk[hk[w]] = tT[w]; opened[w] = true
	:: lr != hr[w] && lt > tT[w] -> stale[w] = true
	:: lr != hr[w] && lt <= tT[w] && !prov[w] ->
		lfence = (lr != 0); lr = hr[w]; lt = tT[w];
#ifdef BUG_LOSTFENCE
		lfence = true;                               /* a ledger created after a loss taken as fenceable */
#endif
		for (j : 0 .. X - 1) { otk[j] = 0 }
		otk[hk[w]] = tT[w]; opened[w] = true
	:: lr != hr[w] && lt <= tT[w] && prov[w] ->
		used = lfence;
		for (j : 0 .. X - 1) { used = used && otk[j] == 0 }
#ifdef BUG_NOFENCE
		used = true;
#endif
		if
		:: used ->
			lr = hr[w]; lt = tT[w];
			for (j : 0 .. X - 1) { otk[j] = 0 }
			otk[hk[w]] = tT[w]; opened[w] = true
		:: else -> skip                              /* held: the old holders have not all released */
		fi
	fi;
	j = 0; used = false
}

/* the consumer drains a kept term and ends it with its final marks and
   the release, in one script call (lua: write.lua's release: cleared only
   by the index's newest opener) */
inline release(w) {
	if :: lr == hr[w] && otk[hk[w]] == tT[w] -> otk[hk[w]] = 0 :: else -> skip fi;
#ifndef BUG_SERVEON
	holds[w] = false; opened[w] = false
#else
	skip                                             /* released, and serving on */
#endif
}

/* the ledger is lost (on a Redis of its own): created again by the next
   ordinary open, it does not know who serves */
inline ledgerLoss() {
	lr = 0; lt = 0; lfence = false;
	for (j : 0 .. X - 1) { otk[j] = 0 };
	j = 0
}
#endif

/* go: runner.decide, at a registration in m = rN */
inline decide(w) {
	m = rN;
	if
	:: m != newest[w] -> skip                        /* go: `if m != newest { return }` */
	:: else ->
		/* go: `if live != nil && !live.Held() { l.endTerm(live, ErrExpired) }` */
		if :: holds[w] && now >= hdl[w] -> holds[w] = false :: else -> skip fi;
		valid = false;
#if defined(BUG_OPEN)
		k = rIdx - 1; rr = rOpen;
		valid = (k < rr);
#elif defined(BUG_ONE)
		if
		:: m >= 1 && REC(w, m - 1) -> k = recIdx[RI(w, m - 1)] - 1; rr = rPC; valid = (k < rr)
		:: else -> skip
		fi;
#else
		/* go: `valid := ok1 && ok2 && k == p2.index && rr == p1.prevCount && k < rr` */
		if
		:: m >= 2 && REC(w, m - 1) && REC(w, m - 2) ->
			k = recIdx[RI(w, m - 1)] - 1; rr = rPC;
			valid = (recIdx[RI(w, m - 1)] == recIdx[RI(w, m - 2)] && rr == recPC[RI(w, m - 1)] && k < rr)
		:: else -> skip
		fi;
#endif
		if
		:: valid ->
			/* go: `due := (m+1)*l.iv + l.slot(...)`; `d := min(due+l.lo, (m+2)*l.iv)` */
			d = (m + 1) * I + SLOT(rIdx - 1, rPC) + LO;
			if :: d > (m + 2) * I -> d = (m + 2) * I :: else -> skip fi;
#ifdef BUG_LATE
			d = d + LO;
#endif
			/* expires: a lease from m is over, on the server's clock, half a gap
			   before m+2 begins (slots end before aimEnd = I - 1.5 lo); the later
			   of two leases whose intervals are two apart begins a gap after it,
			   so 1.5 gaps absorb a step of the server's clock and the drift of
			   the worker's (docs/PROTOCOL.md, "Why it is exclusive") */
			assert(2 * d <= 2 * (m + 2) * I - LO);
			d = d - bsk[w];                      /* go: `deadline = r.clock.local(d)` */
			valid = (d > now)                    /* go: `valid = deadline.After(l.clock.Now())` */
		:: else -> skip
		fi;
		if
		:: !valid ->
			pend[w] = false;                             /* go: `r.pend = nil` */
			if
#ifdef BUG_CAPM
			:: holds[w] -> keep(w, m)                    /* the cap counted from the registration that disagrees */
#else
			:: holds[w] -> keep(w, hM[w])                /* go: `live.keep(...)`: served to its cap, not renewed */
#endif
			:: else -> skip
			fi;
#ifdef FENCE
			/* go: `provisional(...)`: the count changed (count(m-1) != count(m-2))
			   and the index is the one of m-1: the mapping the next registration
			   confirms if nothing else changes, taken now, fenced by the ledger
			   (not by the quarantine: the ledger knows the holders of an earlier
			   generation, or was lost with the store and fences nothing); not
			   from an empty group (count(m-2) = 0: nothing to hand over) */
			fv[w] = false;
			if
			:: m >= 1 && REC(w, m - 1) && recIdx[RI(w, m - 1)] == rIdx && rPC != recPC[RI(w, m - 1)] && recPC[RI(w, m - 1)] != 0 && rIdx - 1 < rPC ->
				d = (m + 1) * I + SLOT(rIdx - 1, rPC) + LO;
				if :: d > (m + 2) * I -> d = (m + 2) * I :: else -> skip fi;
				assert(2 * d <= 2 * (m + 2) * I - LO);
				d = d - bsk[w];
				if :: d > now -> fv[w] = true; fk[w] = rIdx - 1; fr[w] = rPC; fdl[w] = d; fM[w] = m :: else -> skip fi
			:: else -> skip
			fi
#else
			skip
#endif
		:: else ->
#ifdef FENCE
			fv[w] = false;
#endif
			if
			:: holds[w] && hk[w] == k && hr[w] == rr ->
				hM[w] = m;
#ifdef FENCE
				prov[w] = false; kept[w] = false;    /* go: a provisional term confirmed (an ordinary lease from m), or a kept one resumed */
#endif
				if :: d > hdl[w] -> hdl[w] = d :: else -> skip fi   /* go: `live.renew(deadline)` */
			:: else ->
				holds[w] = false;
				if
				:: pend[w] && pk[w] == k && pr[w] == rr -> pdl[w] = d; pM[w] = m
#ifndef BUG_QUAR
				:: !(pend[w] && pk[w] == k && pr[w] == rr) && now < quar[w] -> pend[w] = true; pk[w] = k; pr[w] = rr; pdl[w] = d; pM[w] = m
#endif
				:: else -> holds[w] = true; hk[w] = k; hr[w] = rr; hdl[w] = d; hM[w] = m   /* go: `r.acquire(a, deadline)` */
#ifdef FENCE
					; newTerm(w, m, false)
#endif
				fi
			fi
		fi
	fi
}

/* go: runner.aimAfterMiss, after a "time" reply (rN, rO) */
inline aimAfterMiss(w) {
	if
	:: newest[w] != NONE ->
		if
		:: true ->
			/* go: `p := last.prevCount; if last.n == n-1 { p = rep.prevCount }`; `off := l.slot(last.index, p)` */
			x = RI(w, newest[w]);
			if :: newest[w] + 1 == rN -> sl = SLOT(recIdx[x] - 1, rPC) :: else -> sl = SLOT(recIdx[x] - 1, recPC[x]) fi;
			if
			:: newest[w] >= rN -> nextDue[w] = (newest[w] + 1) * I + sl - bsk[w]   /* go: `if last.n >= n` */
			:: else ->
				if
				:: rO <= sl -> nextDue[w] = rN * I + sl - bsk[w]               /* go: `case rep.offset <= off` */
				:: rO > sl && rO >= LO && rO < I - LO -> nextDue[w] = now      /* go: `r.nextAt = l.clock.Now()` */
				:: rO > sl && !(rO >= LO && rO < I - LO) -> nextDue[w] = (rN + 1) * I + sl - bsk[w]   /* go: `default: n++` */
				fi
			fi;
			x = 0; sl = 0
		fi
	:: else ->
		/* go: `if rep.offset >= l.lo && rep.offset+rtt < l.iv-l.lo` (the
		   round trip is the model's nondeterministic delay: a call sent
		   now may land anywhere after, and one after the window is refused) */
		if
		:: rO >= LO && rO < I - LO -> nextDue[w] = now
		:: rO >= I - LO -> nextDue[w] = (rN + 1) * I + LO - bsk[w]
		:: rO < LO -> nextDue[w] = rN * I + LO - bsk[w]
		fi
	fi
}

/* go: runner.handle, for the reply just executed, received at now */
inline handle(w) {
	if
	:: !alive[w] || paused[w] || !calling[w] || rTok != tok[w] -> skip   /* go: `if res.token != r.token { return nil }` */
	:: else ->
		calling[w] = false;
		if
		:: rGen != wgen[w] ->                       /* go: `if rep.gen != r.gen` */
			hasSk[w] = false;                       /* go: `r.clock.reset()` */
			if :: wgen[w] != NONE -> holds[w] = false :: else -> skip fi;   /* go: `l.endTerm(t, ErrGenerationChanged)` */
			wgen[w] = rGen;
			for (j : 0 .. R - 1) { hasRec[w * R + j] = false }
			newest[w] = NONE;
			pend[w] = false;                        /* go: `r.gen, r.hist, r.pend = rep.gen, nil, nil` */
			quar[w] = now + 2 * I                   /* go: `r.quarantine = res.recv.Add(2 * l.opts.Interval)` */
		:: else -> skip
		fi;
		/* go: clockMap.add: a sample whose latest possible base is before the
		   best (the server's clock moved forward) replaces them all; the best
		   base is the largest lower bound, here the least T - sent */
		if
		:: !hasSk[w] || rSrv - now > bsk[w] -> bsk[w] = rSrv - rSent; hasSk[w] = true
		:: else -> if :: rSrv - rSent < bsk[w] -> bsk[w] = rSrv - rSent :: else -> skip fi
		fi;
		probed[w] = true;
		if
		:: !rOK -> aimAfterMiss(w)                  /* go: `if !rep.registered { r.aimAfterMiss(rep) }` */
		:: else ->
			/* go: `r.remember(rec)` */
			hasRec[RI(w, rN)] = true; recN[RI(w, rN)] = rN; recIdx[RI(w, rN)] = rIdx;
			recPC[RI(w, rN)] = rPC; recTok[RI(w, rN)] = tok[w];
			if :: newest[w] == NONE || rN > newest[w] -> newest[w] = rN :: else -> skip fi;
			newToken(w);                            /* go: `r.token, r.sent = l.token(), false` */
			decide(w);
			nextDue[w] = (rN + 1) * I + SLOT(rIdx - 1, rPC) - bsk[w]   /* go: `r.aim(rec.n+1, rec.index, rec.prevCount)` */
		fi
	fi
}

/* go: runner.attempt: the request of the current token */
inline request(w) {
	if
	:: !calling[w] ->
		calling[w] = true;
		/* go: `c.aimed = r.clock.server(at) / l.iv` */
		cAim[w] = (probed[w] -> (nextDue[w] + bsk[w]) / I : PROBE);
		if
		:: newest[w] != NONE -> cWant[w] = recIdx[RI(w, newest[w])] - 1; cProof[w] = recTok[RI(w, newest[w])]
		:: else -> cWant[w] = NONE; cProof[w] = NONE
		fi
	:: else -> skip                                 /* a retry: the same token, the same call */
	fi;
	/* go: `r.nextAt = latest(at, now).Add(r.retryAfter())`: retried at the next tick */
	nextDue[w] = now + 1
}

/* a fault or a change of membership: the bound on completeness counts
   from the last one's effect */
inline event() {
	events++;
	if :: now > quiet -> quiet = now :: else -> skip fi
}

/* exclusive */
inline checkExclusive() {
	for (a : 0 .. W - 1) {
		for (b : a + 1 .. W - 1) {
			if
#ifdef FENCE
			/* ordinary leases by time, as without the fence */
			:: alive[a] && alive[b] && holds[a] && holds[b] && now < hdl[a] && now < hdl[b] && !prov[a] && !prov[b] ->
				assert(hr[a] == hr[b] && hk[a] != hk[b])
			:: else -> skip
			fi;
			/* fenced: every term that serves, provisional or not */
			if
			:: SERVES(a) && SERVES(b) -> assert(hk[a] != hk[b] && hr[a] == hr[b])
#else
			:: alive[a] && alive[b] && holds[a] && holds[b] && now < hdl[a] && now < hdl[b] ->
				assert(hr[a] == hr[b] && hk[a] != hk[b])
#endif
			:: else -> skip
			fi
		}
	}
}

/* complete */
inline checkComplete() {
	if
	:: now == quiet + Q * I ->
		n = 0;
		for (a : 0 .. W - 1) { if :: alive[a] && !paused[a] && !retiring[a] -> n++ :: else -> skip fi }
		for (a : 0 .. W - 1) {
			if
			:: alive[a] && !paused[a] && !retiring[a] -> assert(holds[a] && now < hdl[a] && hr[a] == n && hk[a] < n)
#ifdef FENCE
				; assert(opened[a] && !prov[a])
#endif
			:: else -> skip
			fi
		}
	:: else -> skip
	fi
}

/* a worker leaves, or is killed -9: to the lease the same (it stops
   registering; a process that is gone does no work) */
inline leave(w) {
	alive[w] = false; holds[w] = false; calling[w] = false; retiring[w] = false
#ifdef FENCE
	; fv[w] = false; opened[w] = false
#endif
}

/* the store restarts empty: a new generation, the clamp lost (and the
   ledger beside it, unless LEASEONLY: the ledger on a Redis of its own) */
inline leaseLoss() {
	for (x : 0 .. R * X - 1) { granted[x] = 0 }
	for (x : 0 .. R * TOK - 1) { tokIdx[x] = 0 }
	for (x : 0 .. R - 1) { cnt[x] = 0; ff[x] = 0 }
	tmax = 0; fresh = true;
	gen = (gen + 1) % 4
}
inline storeLoss() {
	leaseLoss()
#ifdef FENCE
	; ledgerLoss()                                    /* the ledger beside the lease */
#endif
}

/* a worker leaves cleanly (SIGTERM): it stops registering and serves the
   lease it holds to its cap, then exits */
inline retire(w) {
	retiring[w] = true; calling[w] = false; pend[w] = false;
#ifdef FENCE
	fv[w] = false;
#endif
	if :: holds[w] && now < hdl[w] -> keep(w, hM[w]) :: else -> holds[w] = false fi
}

inline join(w) {
	alive[w] = true; paused[w] = false; probed[w] = false; hasSk[w] = false; retiring[w] = false;
	wgen[w] = NONE; holds[w] = false; pend[w] = false; calling[w] = false;
#ifdef FENCE
	fv[w] = false; opened[w] = false;
#endif
	for (j : 0 .. R - 1) { hasRec[w * R + j] = false }
	newest[w] = NONE;
	newToken(w);
	quar[w] = 0;
	nextDue[w] = now                                  /* go: `r.nextAt = l.clock.Now()` */
}

#ifdef SCENARIO
#define NETF false
#else
#define NETF (events < EVENTS)
#endif

/* one step of worker w this tick: its due request, or a late one arriving */
inline step(w) {
	if
	:: late[w] && lateAt[w] == now ->
		/* a request sent at lSent arrives now; its answer is handled if its
		   token is still the one the worker waits on */
		late[w] = false;
		trace(("t=%d srv=%d w=%d late request tok=%d aim=%d\n", now, srv, w, lTok[w], lAim[w]));
		d_step { N = 0; execute(lTok[w], lAim[w], lWant[w], lProof[w]); rSent = lSent[w]; handle(w) }
	:: else ->
		d_step { request(w) }
		trace(("t=%d srv=%d w=%d request tok=%d aim=%d bsk=%d\n", now, srv, w, tok[w], cAim[w], bsk[w]));
		if
		:: d_step { N = 0; execute(tok[w], cAim[w], cWant[w], cProof[w]); rSent = now; handle(w) }
		:: NETF -> event()                             /* the request is lost */
		:: NETF -> event();                            /* it runs, its reply is lost */
			d_step { N = 0; execute(tok[w], cAim[w], cWant[w], cProof[w]) }
		:: NETF && !late[w] -> event();                /* it is delayed: it runs later */
			late[w] = true; lTok[w] = tok[w]; lAim[w] = cAim[w]; lWant[w] = cWant[w]; lProof[w] = cProof[w]; lSent[w] = now;
			if
			:: lateAt[w] = now + 1
			:: lateAt[w] = now + LO + 1
			:: lateAt[w] = now + I - 1
			:: lateAt[w] = now + I
			:: lateAt[w] = now + DMAX
			fi;
			if :: lateAt[w] > quiet -> quiet = lateAt[w] :: else -> skip fi   /* the fault lasts until it arrives */
		fi
	fi
}

#define DUE(w) ((late[w] && lateAt[w] == now) || (alive[w] && !paused[w] && !retiring[w] && now >= nextDue[w]))

active proctype world() {
	byte w, j, x, N, f, m, k, rr, n, a, b;
	short d;
	byte sl;
	byte t2;
	bool used;
	byte steps;
	bool valid;

	d_step {
		for (w : 0 .. W - 1) { tok[w] = w * SEQ; newest[w] = NONE; wgen[w] = NONE }
		/* two workers from the start; others may join */
		join(0); join(1)
	}
	do
	:: now >= T -> break
	:: else ->
		/* Membership and faults. */
		if
		:: skip
#ifdef SCENARIO
		/* the scenario: a join, a leave, a restart and a store loss, each
		   once, in any order, at any time */
		:: !(did & 1) -> select (w : 0 .. W - 1);
			if :: !alive[w] -> did = did | 1; event(); d_step { join(w) } :: else -> skip fi
		:: !(did & 2) -> select (w : 0 .. W - 1);
			if :: alive[w] -> did = did | 2; event(); leave(w) :: else -> skip fi
		:: !(did & 4) -> select (w : 0 .. W - 1);
			if :: alive[w] -> did = did | 4; event(); d_step { join(w) } :: else -> skip fi
		:: !(did & 8) -> did = did | 8; event(); d_step { storeLoss() }
#else
		:: events < EVENTS ->
			select (w : 0 .. W - 1);
			if
			:: !alive[w] -> event(); d_step { join(w) }                /* joins */
			:: alive[w] -> event(); leave(w)                            /* is killed -9 */
			:: alive[w] && !retiring[w] && !paused[w] -> event(); d_step { retire(w) }   /* leaves cleanly, serving to its cap */
			:: alive[w] -> event(); d_step { join(w) }                 /* restarts: killed -9, and a new process with no memory */
			:: alive[w] && !paused[w] -> event(); paused[w] = true    /* SIGSTOP */
			:: alive[w] && paused[w] -> event(); paused[w] = false    /* SIGCONT: answers lost while stopped are retried */
			fi
		:: events < EVENTS -> event(); d_step { storeLoss() }          /* the store restarts empty */
#ifdef FENCE
		:: events < EVENTS -> event(); d_step { ledgerLoss() }         /* the ledger, on a Redis of its own, is lost */
		:: events < EVENTS -> event(); d_step { leaseLoss() }          /* the lease's Redis restarts empty, the ledger's does not */
#endif
		:: events < EVENTS -> event(); skew = skew + LO                /* the server's clock steps forward by lo */
		:: events < EVENTS && now + skew > I -> event(); skew = skew - I / 2;  /* it steps back: the clamp holds it */
			if :: now + I / 2 > quiet -> quiet = now + I / 2 :: else -> skip fi   /* no interval ends until real time catches up */
#endif
		fi;
		d_step {
			/* lua: `if tmax and tmax > T then T = tmax end` */
			if :: now + skew > tmax -> srv = now + skew :: else -> srv = tmax fi;
			tmax = srv;
			/* a new interval's ring slot is empty (lua: the first registration of N
			   deletes every interval before N-2) */
			if
			:: fresh -> topN = srv / I; fresh = false
			:: else ->
				do
				:: topN < srv / I -> topN++; cnt[slot(topN)] = 0; ff[slot(topN)] = 0;
					for (x : 0 .. X - 1) { G(topN, x) = 0 }
					for (x : 0 .. TOK - 1) { TK(topN, x) = 0 }
				:: else -> break
				od
			fi;
			/* go: the loop's timers: local expiry, then the pending lease */
			for (w : 0 .. W - 1) {
				if
				:: alive[w] && !paused[w] ->
					if :: holds[w] && now >= hdl[w] -> holds[w] = false :: else -> skip fi;
					if
					:: pend[w] && now >= pdl[w] -> pend[w] = false
					:: pend[w] && now < pdl[w] && now >= quar[w] ->
						pend[w] = false; holds[w] = true; hk[w] = pk[w]; hr[w] = pr[w]; hdl[w] = pdl[w]; hM[w] = pM[w]
#ifdef FENCE
						; newTerm(w, pM[w], false)
#endif
					:: else -> skip
					fi
				:: else -> skip
				fi;
				act[w] = DUE(w)
			}
#ifdef FENCE
			/* the consumers: a kept term drained and released; a provisional
			   term begun once the one before it ended; a term's open (tried
			   each tick until it serves or is refused for good) */
			for (w : 0 .. W - 1) {
				if :: alive[w] && !paused[w] && holds[w] && now < hdl[w] && kept[w] -> release(w) :: else -> skip fi
			}
			for (w : 0 .. W - 1) {
				if
				:: alive[w] && !paused[w] ->
					if :: fv[w] && now >= fdl[w] -> fv[w] = false :: else -> skip fi;
					if
					:: fv[w] && !(holds[w] && now < hdl[w]) ->
						fv[w] = false; holds[w] = true; hk[w] = fk[w]; hr[w] = fr[w]; hdl[w] = fdl[w]; hM[w] = fM[w];
						newTerm(w, fM[w], true)
					:: else -> skip
					fi;
					if :: holds[w] && now < hdl[w] && !opened[w] && !stale[w] -> open(w) :: else -> skip fi
				:: else -> skip
				fi
			}
#endif
		}
		/* The workers that act this tick, in every order. */
		do
		:: steps > 4 * W -> assert(false)   /* a worker loops within a tick */
		:: act[0] -> act[0] = false; steps++; step(0); act[0] = DUE(0)
		:: act[1] -> act[1] = false; steps++; step(1); act[1] = DUE(1)
#if W > 2
		:: act[2] -> act[2] = false; steps++; step(2); act[2] = DUE(2)
#endif
#if W > 3
		:: act[3] -> act[3] = false; steps++; step(3); act[3] = DUE(3)
#endif
		:: else -> break
		od;
		skip;                     /* (spin: a jump may not enter a d_step) */
		d_step {
			checkExclusive();
			checkComplete();
			now++;
			canon()
		}
	od
}
