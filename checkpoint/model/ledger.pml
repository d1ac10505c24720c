/*
 * The checkpoint ledger as a Promela model, checked by spin.
 *
 * It mirrors checkpoint/open.lua and checkpoint/write.lua ("lua:" below),
 * the skip rule of checkpoint.State.Done and the consumer's marks
 * (consumer/marks.go, consumer/open.go: "go:"), quoting the line each
 * construct stands for. make model checks it, and each seeded bug below,
 * through checkpoint/model/model_test.go.
 *
 * One shard, a log of L tasks at positions 1..L; the task at p has id p,
 * so index k of r owns it when p % r == k. The lease is taken as the
 * lease model (partition/model/lease.pml) proves it: terms of different
 * replicas never overlap, no two live terms share an index, and a term's
 * token is above every earlier term's. What happens, nondeterministically:
 * a worker begins a term of (k, r) (opening the ledger), reads the next
 * message, finishes any task it holds unfinished (in any order, as
 * concurrent handlers do), writes its marks, ends its term cleanly (the
 * drain: what is unfinished stays listed), and, within a budget of EVENTS
 * faults: is killed -9 (it writes nothing more, and forgets the epoch it
 * saw), is paused past its lease (a former holder: later it may still
 * finish a task it held and write its marks, late), or the ledger is lost
 * (evicted, flushed, a failover before it replicated).
 *
 * Properties, asserted after every step:
 *  nothing owned is skipped: every task a live holder has read past
 *    (below its next position) and does not hold unfinished was done;
 *  nothing is done twice on a clean handover: with no fault so far, no
 *    task is done twice;
 *  a former holder never overwrites a newer holder's mark: a write is
 *    applied only by the newest holder of its index to open the epoch, and
 *    a mark's Low never goes back.
 *
 * Seeded bugs, each under a define, must be refused by the same checks:
 *  BUG_NOFENCE  the write script without its fence (otok, ptok)
 *  BUG_NOUNDONE marks without the Undone list (all between Low and High done)
 *  BUG_NOKEEP   a term's write drops what the index's earlier mark knew beyond it
 *  BUG_NOHOLD   (with FENCE) a provisional term opens the next epoch
 *               before every index of the current one released it
 *  BUG_MARKSLATE (with FENCE) a holder releases its index before its final
 *               marks are written: the next epoch starts from marks that
 *               are not final, and its holders do again what was done
 *  BUG_ANYR     the write script as it was before this model: an epoch is
 *               known by its number only. The model's counterexample (L=4,
 *               RM=3, TERMS=3, breadth first, depth 49): a holder of index
 *               1 of 2 reads tasks 1..4 and does 1 and 3; it is paused past
 *               its lease; the ledger is lost; a worker that saw none of it
 *               opens index 0 of 3, creating epoch 1 again, of 3 replicas;
 *               the former holder writes late into epoch 1 (nobody has
 *               opened index 1 there to fence it); its mark, read as index
 *               1 of 3's, says task 4 is done, and the next holder of index
 *               1 of 3 skips it. write.lua now refuses a write whose
 *               replicas are not the epoch's (moved); Go regression test:
 *               checkpoint.TestLateWriteIntoAnEpochOfAnotherMappingIsMoved.
 *
 * FENCE adds the fenced handoff (docs/PROTOCOL.md): a term of other
 * replicas than the live ones may also begin as a provisional term (the
 * lease's, from one closed interval), which the ledger lets open the next
 * epoch only when every index of the current one has released it: its
 * holder's clean end writes its final marks and the release in one
 * script call. An epoch created after the ledger was lost does not know
 * who serves it, and fences nothing: provisional terms wait for the lease's
 * timing there.
 */

#ifndef L
#define L 4            /* tasks, at positions 1..L */
#endif
#define W 2            /* worker processes */
#ifndef RM
#define RM 3           /* replicas are 1..RM */
#endif
#ifndef TERMS
#define TERMS 4        /* terms begun, in all */
#endif
#ifndef EVENTS
#define EVENTS 2       /* faults, in all */
#endif
#define EP (TERMS + EVENTS + 2)   /* epochs 1..EP-1: each term or loss creates at most one */
#define ORIGIN 1       /* go: `origin` (the log's beginning) */
#define BIT(p) (1 << (p))

/* The ledger: lua: `{name}:ledger` */
bool exists;
byte cur;              /* lua: `cur` */
short hist;            /* lua: `hist`, as a set of epochs (bit n) */
byte er[EP];           /* lua: `n:r` */
byte etok[EP];         /* lua: `n:tok` */
byte estart[EP];       /* lua: `n:start:s` */
byte otok[EP * RM];    /* lua: `n:otok:k` */
bool hasPos[EP * RM];
byte pos[EP * RM];     /* lua: `n:pos:s:k` (Low) */
byte top[EP * RM];     /* lua: `n:top:s:k` (High; 0: none, High is Low) */
byte und[EP * RM];     /* lua: `n:und:s:k` (Undone, as a set of positions) */
byte ptok[EP * RM];    /* lua: `n:ptok:s:k` */
#ifdef FENCE
byte rel[EP * RM];     /* lua: `n:rel:k`, the token that released index k of epoch n */
bool nofence[EP];      /* lua: `n:nofence`: created after a loss */
bool prov[W];          /* the worker's term is provisional */
#endif
#define EK(n, k) ((n) * RM + (k))
#define LOW(n, k) (hasPos[EK(n, k)] -> pos[EK(n, k)] : estart[n])
#define HIGH(n, k) (top[EK(n, k)] != 0 -> top[EK(n, k)] : LOW(n, k))

/* The workers: go: consumer's shared and term state */
byte st[W];            /* 0: no term; 1: holding; 2: a former holder, paused past its lease */
byte wk[W];            /* the lease's index */
byte wr[W];            /* its replicas */
byte wt[W];            /* its token */
byte we[W];            /* the epoch it opened */
bool moved[W];         /* a write met another epoch: drain, then open again */
byte next[W];          /* go: shardTrack.next */
byte unf[W];           /* go: shardTrack's unfinished tasks, as a set */
byte prLow[W];         /* go: `tr.st.Current.Mark(s, tr.a.Index)` at open */
byte prHigh[W];
byte prUnd[W];
byte seen[W];          /* go: `sh.seen`, `sh.seenStart` */
byte seenStart[W];

/* What happened, for the properties. */
byte done[L + 1];      /* times each task was done (capped) */
bool dirty;            /* a fault happened: work may be done again */
byte newest[EP * RM];  /* the newest token to open epoch n for index k */
byte maxTok;
byte terms;
byte events;

/* results of the scripts */
byte res;              /* 0 ok, 1 stale, 2 moved, 3 fenced, 4 held */

#ifdef FENCE
/* lua: every index of the current epoch released: its newest opener wrote
   its release (or nobody opened it), and the epoch knows who serves it */
#define REL(i) (otok[EK(cur, i)] == 0 || rel[EK(cur, i)] >= otok[EK(cur, i)])
inline releasedInto(ok) {
	ok = !nofence[cur];
	for (i : 0 .. er[cur] - 1) { ok = ok && REL(i) }
	i = 0
}
#endif

/* lua: open.lua, for worker w holding (wk, wr, wt) */
inline open(w) {
	res = 0;
#ifdef FENCE
	rl = true;
	if :: exists && prov[w] && er[cur] != wr[w] -> releasedInto(rl) :: else -> skip fi;
#ifdef BUG_NOHOLD
	rl = true;                                       /* a provisional term opens without the releases */
#endif
#endif
	if
#ifdef FENCE
	:: !exists && prov[w] -> res = 4                    /* lua: held: a new ledger knows no releases */
	:: exists && prov[w] && er[cur] == wr[w] && !REL(wk[w]) && otok[EK(cur, wk[w])] != wt[w] -> res = 4   /* lua: held: its index's last opener has not released */
	:: exists && prov[w] && er[cur] != wr[w] && wt[w] > etok[cur] && !rl -> res = 4   /* lua: held */
	:: !exists && !prov[w] ->
#else
	:: !exists ->
#endif
		/* lua: `if not cur then ... if seen > 0 then n, why = seen + 1, 'lost'` */
		exists = true;
		if
		:: seen[w] > 0 -> n = seen[w] + 1; s0 = seenStart[w]
		:: else -> n = 1; s0 = ORIGIN
		fi;
		assert(n < EP);
		hist = BIT(n);
		create(n, s0, w)
#ifdef FENCE
		; nofence[n] = true
#endif
#ifdef FENCE
	:: exists && !(prov[w] && er[cur] != wr[w] && wt[w] > etok[cur] && !rl) &&
	   !(prov[w] && er[cur] == wr[w] && !REL(wk[w]) && otok[EK(cur, wk[w])] != wt[w]) ->
#else
	:: else ->
#endif
		if
		:: er[cur] == wr[w] -> skip                    /* lua: `if rc == r ... return reply('ok', cur, why)` */
		:: er[cur] != wr[w] && wt[w] <= etok[cur] -> res = 1   /* lua: `return {'stale', ...}` */
		:: else ->
			/* lua: the new epoch starts at the lowest low of the current one's indexes */
			n = cur + 1;
			assert(n < EP);
			s0 = L + 1;
			for (i : 0 .. er[cur] - 1) { if :: LOW(cur, i) < s0 -> s0 = LOW(cur, i) :: else -> skip fi }
			/* lua: an older epoch leaves the history once the new start has passed
			   everything it says is done */
			for (h : 1 .. EP - 1) {
				if
				:: hist & BIT(h) ->
					needed = false;
					for (i : 0 .. er[h] - 1) { needed = needed || HIGH(h, i) > s0 }
					if :: !needed -> hist = hist & ~BIT(h); forget(h) :: else -> skip fi
				:: else -> skip
				fi
			}
			hist = hist | BIT(n);
			create(n, s0, w)
		fi
	fi;
	if
	:: res == 0 ->
		/* lua: `stamp(n)`: the newest holder of k to open the epoch fences older ones */
		if :: otok[EK(cur, wk[w])] < wt[w] -> otok[EK(cur, wk[w])] = wt[w] :: else -> skip fi;
		if :: newest[EK(cur, wk[w])] < wt[w] -> newest[EK(cur, wk[w])] = wt[w] :: else -> skip fi;
		/* go: noteLedger: the newest epoch seen, and its start */
		if :: cur >= seen[w] -> seen[w] = cur; seenStart[w] = estart[cur] :: else -> skip fi;
		/* go: `shards[s] = &shardTrack{next: p}` from `st.From(tr.a.Index)` */
		we[w] = cur;
		next[w] = LOW(cur, wk[w]);
		unf[w] = 0;
		moved[w] = false;
		prLow[w] = LOW(cur, wk[w]); prHigh[w] = HIGH(cur, wk[w]);
		prUnd[w] = und[EK(cur, wk[w])]
	:: else -> skip
	fi
}


inline forget(h) {
	er[h] = 0; etok[h] = 0; estart[h] = 0;
#ifdef FENCE
	nofence[h] = false;
	for (i : 0 .. RM - 1) { rel[EK(h, i)] = 0 }
#endif
	for (i : 0 .. RM - 1) {
		otok[EK(h, i)] = 0; hasPos[EK(h, i)] = false; pos[EK(h, i)] = 0; top[EK(h, i)] = 0;
		und[EK(h, i)] = 0; ptok[EK(h, i)] = 0
	}
}

inline create(n, s0, w) {
	forget(n);
	er[n] = wr[w]; etok[n] = wt[w]; estart[n] = s0;  /* lua: `create(n, starts, histstr, A)` */
	cur = n
}

/* go: State.Done: some epoch of the history has p done by its mark of
   (s, p % r) (checkpoint.Mark.Done) */
inline isDone(p) {
	dn = false;
	for (h : 1 .. EP - 1) {
		if
		:: hist & BIT(h) ->
			i = p % er[h];
			dn = dn || p < LOW(h, i) ||
			     (LOW(h, i) < p && p < HIGH(h, i) && (und[EK(h, i)] & BIT(p)) == 0)
		:: else -> skip
		fi
	}
}

/* go: shardTrack.mark, then m.KeepBeyond(prior) (checkpoint/keepbeyond.go): the mark worker w writes */
inline mark(w) {
	if
	:: unf[w] == 0 -> mLow = next[w]; mHigh = next[w]; mUnd = 0
	:: else ->
		mLow = 1;
		do :: (unf[w] & BIT(mLow)) == 0 -> mLow++ :: else -> break od;
		mHigh = next[w];
#ifdef BUG_NOUNDONE
		mUnd = 0
#else
		mUnd = unf[w] & ~BIT(mLow)
#endif
	fi;
#ifndef BUG_NOKEEP
	if
	:: mHigh < prHigh[w] ->
		/* go: KeepBeyond: prior's unfinished positions not read yet */
		extra = 0;
		if :: prLow[w] >= mHigh -> extra = BIT(prLow[w]) :: else -> skip fi;
		for (p : mHigh .. L) { if :: prUnd[w] & BIT(p) -> extra = extra | BIT(p) :: else -> skip fi }
		if
		:: mLow == mHigh ->
			if
			:: extra == 0 -> mLow = prHigh[w]; mUnd = 0
			:: else ->
				mLow = 1;
				do :: (extra & BIT(mLow)) == 0 -> mLow++ :: else -> break od;
				mUnd = mUnd | (extra & ~BIT(mLow))
			fi
		:: else -> mUnd = mUnd | extra
		fi;
		mHigh = prHigh[w]
	:: else -> skip
	fi
#endif
}

/* the epoch is of the writer's replicas (BUG_ANYR: not checked) */
#ifdef BUG_ANYR
#define SAMER(w) true
#else
#define SAMER(w) (er[cur] == wr[w])
#endif

/* lua: write.lua, for worker w's marks */
inline write(w) {
	mark(w);
	e = EK(we[w], wk[w]);
	if
	:: !exists || cur != we[w] -> res = 2                         /* lua: `if cur ~= e then return {'moved', ...}` */
#ifndef BUG_ANYR
	/* lua: `if r ~= '0' and rc ~= r then return {'moved', cur, rc or '0'}`:
	   an epoch lost and created again under its number by another mapping */
	:: exists && cur == we[w] && er[cur] != wr[w] -> res = 2
#endif
#ifndef BUG_NOFENCE
	:: exists && cur == we[w] && SAMER(w) && otok[e] > wt[w] -> res = 3      /* lua: `if o and tonumber(o) > tok then return {'fenced', o}` */
	:: exists && cur == we[w] && SAMER(w) && hasPos[e] && ptok[e] > wt[w] -> res = 3
#endif
	:: else ->
		res = 0;
		if
		:: !hasPos[e] || mLow >= pos[e] ->                       /* lua: `if not old or ARGV[i + 1] >= old` */
			/* a former holder never overwrites a newer holder's mark */
			assert(wt[w] >= newest[e]);
#ifdef STRICT
			assert(er[cur] == wr[w]);
#endif
			hasPos[e] = true; pos[e] = mLow; ptok[e] = wt[w];
			top[e] = (mHigh > mLow -> mHigh : 0);
			und[e] = mUnd
		:: else -> skip
		fi
	fi;
	if :: res == 2 -> moved[w] = true :: else -> skip fi;
	if :: res == 3 -> st[w] = 0 :: else -> skip fi              /* go: fenced: the term is over */
}

/* nothing owned is skipped, nothing done twice on a clean run */
inline check() {
	for (w : 0 .. W - 1) {
		if
		:: st[w] == 1 ->
			for (p : 1 .. L) {
				if
				:: p < next[w] && p % wr[w] == wk[w] && (unf[w] & BIT(p)) == 0 -> assert(done[p] > 0)
				:: else -> skip
				fi
			}
		:: else -> skip
		fi
	}
	for (p : 1 .. L) { assert(dirty || done[p] <= 1) }
}

/* a term of (k, r) for worker w may begin: no live term of other replicas
   or of the same index (the lease's exclusivity) */
inline mayBegin(w, k, r, ok) {
	ok = (st[w] == 0);
#ifdef FENCE
	if
	:: prov[w] ->
		/* a provisional term: fenced by the ledger from the live terms of
		   other replicas, by time from those of its own (the lease) */
		for (x : 0 .. W - 1) { ok = ok && !(st[x] == 1 && wr[x] == r && wk[x] == k) }
	:: else ->
		for (x : 0 .. W - 1) { ok = ok && !(st[x] == 1 && (wr[x] != r || wk[x] == k)) }
	fi
#else
	for (x : 0 .. W - 1) { ok = ok && !(st[x] == 1 && (wr[x] != r || wk[x] == k)) }
#endif
}

active proctype world() {
	byte w, x, n, s0, i, h, p, e, mLow, mHigh, mUnd, extra, k, r;
	bool ok, needed, dn, rl;
	do
	/* a term begins (go: the consumer opens the ledger at a new lease) */
	:: terms < TERMS -> atomic {
		select (w : 0 .. W - 1);
		select (r : 1 .. RM);
		select (k : 0 .. r - 1);
#ifdef FENCE
		if :: st[w] == 0 -> prov[w] = false :: st[w] == 0 -> prov[w] = true :: else -> skip fi;
#endif
		skip;                     /* (spin: a jump may not enter a d_step) */
		d_step {
			mayBegin(w, k, r, ok);
			if
			:: ok ->
				terms++; maxTok++;
				st[w] = 1; wk[w] = k; wr[w] = r; wt[w] = maxTok;
				open(w);
				if :: res == 1 -> st[w] = 0 :: else -> skip fi
#ifdef FENCE
				; if :: res == 4 -> st[w] = 0; terms--; maxTok--; wk[w] = 0; wr[w] = 0; wt[w] = 0; prov[w] = false :: else -> skip fi
#endif
			:: else -> skip
			fi;
			check(); w = 0; x = 0; k = 0; r = 0; ok = false; n = 0; s0 = 0; i = 0; h = 0; p = 0; needed = false; res = 0
		}
	}
	/* a holder acts (one process: atomic only keeps spin from storing the
	   states between a choice and its step) */
	:: atomic { select (w : 0 .. W - 1);
		if
		:: st[w] == 1 && !moved[w] && next[w] <= L ->
			/* it reads the next message: its own, unless the history has it done */
			d_step {
				p = next[w]; next[w]++;
				if
				:: p % wr[w] == wk[w] ->
					isDone(p);
					if :: !dn -> unf[w] = unf[w] | BIT(p) :: else -> skip fi
				:: else -> skip
				fi;
				check(); w = 0; p = 0; i = 0; h = 0; dn = false
			}
		:: st[w] != 0 && unf[w] != 0 ->
			/* it finishes one of its unfinished tasks (a former holder too: late) */
			select (p : 1 .. L);
			skip;
			d_step {
				if
				:: (unf[w] & BIT(p)) != 0 ->
					unf[w] = unf[w] & ~BIT(p);
					if :: done[p] < 3 -> done[p]++ :: else -> skip fi
				:: else -> skip
				fi;
				check(); w = 0; p = 0
			}
		:: st[w] != 0 ->
			/* it writes its marks (a former holder: late) */
			d_step { write(w); check(); w = 0; e = 0; mLow = 0; mHigh = 0; mUnd = 0; extra = 0; p = 0; res = 0 }
		:: st[w] == 1 && moved[w] && unf[w] == 0 ->
			/* drained after a write met another epoch: it opens again */
			d_step { open(w); if :: res == 1 -> st[w] = 0 :: else -> skip fi; check(); w = 0; n = 0; s0 = 0; i = 0; h = 0; needed = false; res = 0 }
#if defined(FENCE) && defined(BUG_MARKSLATE)
		:: st[w] == 1 ->
			/* the release first, the final marks in a later call */
			d_step {
				if :: exists && cur == we[w] && rel[EK(cur, wk[w])] < wt[w] -> rel[EK(cur, wk[w])] = wt[w] :: else -> skip fi;
				st[w] = 3; w = 0
			}
		:: st[w] == 3 ->
			d_step {
				write(w);
				st[w] = 0; unf[w] = 0; moved[w] = false; prov[w] = false;
				check(); w = 0; e = 0; mLow = 0; mHigh = 0; mUnd = 0; extra = 0; p = 0; res = 0
			}
#else
		:: st[w] == 1 ->
			/* a clean end: the drain writes the last marks, what is unfinished
			   stays listed (FENCE: and releases the index, in the same call) */
			d_step {
				write(w);
#ifdef FENCE
				if :: res == 0 && rel[EK(we[w], wk[w])] < wt[w] -> rel[EK(we[w], wk[w])] = wt[w] :: else -> skip fi;
				prov[w] = false;
#endif
				st[w] = 0; unf[w] = 0; moved[w] = false;
				check(); w = 0; e = 0; mLow = 0; mHigh = 0; mUnd = 0; extra = 0; p = 0; res = 0
			}
#endif
		:: st[w] == 2 ->
			d_step { st[w] = 0; unf[w] = 0; moved[w] = false; w = 0 }   /* the former holder's drain is over */
		:: events < EVENTS && st[w] != 0 ->
			/* killed -9: it writes nothing more and forgets what it saw */
			d_step { events++; dirty = true; st[w] = 0; unf[w] = 0; moved[w] = false; seen[w] = 0; seenStart[w] = 0; w = 0 }
		:: events < EVENTS && st[w] == 1 ->
			/* paused past its lease: a former holder from now on */
			d_step { events++; dirty = true; st[w] = 2; w = 0 }
		:: else -> w = 0
		fi
	}
	/* the ledger is lost */
	:: events < EVENTS && exists ->
		d_step {
			events++; dirty = true; exists = false; cur = 0; hist = 0;
			for (h : 1 .. EP - 1) { forget(h) }
			for (h : 0 .. EP * RM - 1) { newest[h] = 0 }
			h = 0; i = 0
		}
	od
}
