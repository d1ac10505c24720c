/*
 * An aligned log that grows shards, and producers that place keys
 * otherwise than it declares, as a Promela model checked by spin.
 *
 * It mirrors the alignment rules of checkpoint/common.lua ("lua:"), the
 * consumer's reading set and its check of each message (consumer/open.go,
 * consumer/intake.go: "go:"), and checkpoint.Epoch.Reads, Placed and Low.
 * ledger.pml checks the marks themselves (Undone, KeepBeyond, fences,
 * losses) on one shard; here a mark is the position after the last
 * message its index read (every message is done when read, or is not its
 * own), and what is checked is what a shard count adds: which indexes
 * read which shards, and where each shard's low watermark is.
 *
 * The log starts with two shards, aligned (an id x in shard x % 2), and
 * may grow to three. Its producer places x in shard x % (its count) and
 * switches from 2 to 3 at any time after the log grew, before or after
 * the group noticed; a rogue producer (within a budget) puts an id in any
 * shard. Ids are 0, 3 and 4: 0 is in shard 0 by either count, 3 in 1
 * by two and 0 by three, 4 in 0 by two and 1 by three. Two workers hold
 * terms of (k, r), r in 2..3, as the lease allows (no
 * two live terms of other replicas or of one index), open the ledger, read
 * the shards it says in order, check each message's placement, do and
 * mark each (a mark written at once is the most a mark can claim), open
 * again (the consumer does when a write meets a new epoch, and once its
 * marks pass the cuts), and end terms cleanly.
 *
 * A holder learns of a new epoch only when it writes: until then it reads
 * on as its epoch says, and what it does is written there late, when that
 * epoch is still in the history (lua: write.lua's "late"), or is lost,
 * when it is not ("moved"). A task is skipped by a holder when a write
 * recorded it done, in any epoch (the skip rule, which ledger.pml checks
 * mark by mark); an epoch leaves the history when every High of it is at
 * or below the new epoch's start (lua: successor()).
 *
 * Properties, asserted after every step:
 *  nothing is skipped: every task of the current epoch's shard s below
 *    its low watermark there is done (the low watermark is what a log
 *    trims below, what a sink takes as done, and where a new epoch
 *    starts);
 *  realigning ends: every epoch has a cause (a term of other replicas,
 *    the growth, a late entry, the first misplaced one), so there are at
 *    most EPOCHS of them;
 *  nothing is done twice: no task is done by two holders, with no fault
 *    (a holder left on an old epoch by realigns is not a fault);
 *  the history is bounded: at most HISTORY epochs in it.
 *
 * The rule that keeps the last two: a realign waits (nothing written)
 * until every index has opened the current epoch (lua: realign.lua,
 * "wait"), so that no holder is ever two epochs behind: the only older
 * epoch a holder still writes into is the current one's predecessor,
 * which a successor always keeps.
 *
 * Seeded bugs, each refused by it:
 *  BUG_OLD    the rule as it was: a grown log keeps its old count for the
 *             old shards (the epoch does not follow the growth), and no
 *             message's placement is checked. Found by the issue on Redis
 *             streams (12 -> 16 shards under 3 workers: 96 of 288 tasks
 *             never done); here 2 -> 3 under 2 workers.
 *  BUG_NOCUT  the grown count applied to what was written before the
 *             growth (no cut): an entry placed by the old count is not
 *             its reader's, the reader realigns, and the next epoch is
 *             no different, without end.
 *  BUG_TRUST  the growth followed, but no message's placement checked: a
 *             task the rogue producer put where its owner does not read is
 *             passed by the others.
 *  BUG_EAGER  the rule as it was before "wait": a realign makes an epoch
 *             whoever has not opened the current one. A holder left two
 *             epochs behind (its share gets no late entries) writes into
 *             an epoch a later realign dropped from the history: moved,
 *             its marks lost, and its tasks done again (found on a Redis
 *             stream by the issue: 94 of 3,600 tasks twice, no fault).
 */

#define S 3            /* shards, at most */
#ifndef L
#define L 2            /* entries per shard, at most */
#endif
#define W 2            /* workers */
#ifndef TERMS
#define TERMS 2        /* terms begun, in all */
#endif
#ifndef RM
#define RM 3           /* replicas are 2..RM */
#endif
#ifndef ENTRIES
#define ENTRIES 3      /* entries the producer writes */
#endif
#ifndef ROGUE
#define ROGUE 1        /* entries the rogue producer writes */
#endif
#ifndef HISTORY
#define HISTORY 4      /* epochs in the history, at most */
#endif
#define E(s, p) ((s) * L + (p))
/* each epoch has a cause: a term of other replicas, the growth, a late
   entry, the first misplaced one */
#define EPOCHS (TERMS + 1 + ENTRIES + ROGUE + 1)

/* The log */
byte shards = 2;       /* the log's shards */
byte pcount = 2;       /* the producer's count */
byte nlen[S];
byte id[S * L];
byte done[S * L];      /* how many times each task was done */
bool rec[S * L];       /* a write recorded it done (the skip rule sees it) */
byte written;
byte rogue;

/* The current epoch of the ledger (lua: `n:r`, `n:aligned`, `n:was`,
   `n:cut:s`, `n:start:s`, marks `n:s:k`). Older epochs matter only to the
   skip rule, which ledger.pml checks. */
byte er;               /* its replicas (0: no ledger yet) */
byte eA;               /* aligned count (0: not aligned) */
byte ewas;             /* the count before the log grew (0: none) */
byte eshards;
byte ep;               /* its number */
byte start[S];
byte cut[S];           /* c + 1: entries below c were placed by an older count; 0: none */
byte eopen;            /* the indexes that opened it (bit k) */
/* The history: which epochs are in it, and each one's highest mark per
   shard (lua: `n:hi:s`, at least its start) */
bool kept[EPOCHS + 2];  /* one more: an epoch past EPOCHS is recorded, and check refuses it */
byte hi[(EPOCHS + 2) * S];
byte mk[S * RM];       /* mark of (s, k): the next entry to read */
bool hasMk[S * RM];
#define MK(s, k) (hasMk[(s) * RM + (k)] -> mk[(s) * RM + (k)] : start[s])

/* The workers (go: a term) */
bool live[W];
byte wk[W];
byte wr[W];
byte wep[W];           /* the epoch it opened */
byte rd[W];            /* the shards it reads (bit s) */
byte nxt[S * W];       /* the next entry it reads, per shard */
byte wA[W];            /* its epoch's aligned count, */
byte wwas[W];          /* the count before the growth, */
byte wcut[S * W];      /* and cuts, as it opened them */
byte dirty[W];         /* tasks it did and has not written (bit E(s, p)) */
byte terms;

/* lua: canOwn(A, r, s, k); gcd(A, r) for A and r in {2, 3} */
#define GCD(a, b) ((a) == (b) -> (a) : 1)
#define CANOWN(s, k) (eA == 0 || (s) >= eA || ((s) % GCD(eA, er)) == ((k) % GCD(eA, er)))
/* lua: counts(e, s, k, lo); go: Epoch.Reads */
#define READS(s, k) (CANOWN(s, k) || (cut[s] != 0 && MK(s, k) < cut[s] - 1))

/* go: Epoch.Low: the lowest mark of the indexes that read the shard */
inline low(s, lo) {
	lo = 255;
	for (i : 0 .. er - 1) {
		if :: READS(s, i) && MK(s, i) < lo -> lo = MK(s, i) :: else -> skip fi
	}
	if :: lo == 255 -> lo = start[s] :: else -> skip fi
}

/* lua: successor(): epoch ep+1 of nr replicas aligned to nA starts at the
   current one's low watermarks; a shard that grew (below grown) is cut at
   the log's end, a late producer (extend) moves the cuts below the count
   before to the end, and a cut is kept while below it. */
inline successor(nr, nA, grown, extend) {
	for (s : 0 .. S - 1) {
		if
		:: s < eshards -> low(s, lo); ns[s] = lo
		:: else -> ns[s] = 0
		fi;
		nc[s] = 0;
		if
		:: nA > 0 && s < nA ->
			if :: cut[s] != 0 && ns[s] < cut[s] - 1 -> nc[s] = cut[s] :: else -> skip fi;
#ifndef BUG_NOCUT
			if :: (grown > 0 && s < grown) || (extend && s < ewas) -> nc[s] = nlen[s] + 1 :: else -> skip fi;
#endif
			if :: nc[s] != 0 && ns[s] >= nc[s] - 1 -> nc[s] = 0 :: else -> skip fi
		:: else -> skip
		fi
	}
	/* the history: an epoch stays while a High of it lies above the new
	   start, and the current one always (its holders drain into it) */
	for (i : 1 .. EPOCHS) {
		if
		:: kept[i] && i != ep ->
			kept[i] = false;
			for (s : 0 .. S - 1) { if :: hi[i * S + s] > ns[s] -> kept[i] = true :: else -> skip fi }
		:: else -> skip
		fi
	}
	if :: grown > 0 -> ewas = grown :: else -> skip fi;
	er = nr; eA = nA; ep++; eopen = 0; kept[ep] = true;
	eshards = (shards > eshards -> shards : eshards);
	for (s : 0 .. S - 1) {
		start[s] = ns[s]; cut[s] = nc[s]; hi[ep * S + s] = ns[s]; ns[s] = 0; nc[s] = 0;
		for (i : 0 .. RM - 1) { hasMk[s * RM + i] = false; mk[s * RM + i] = 0 }
	}
}

/* lua: open.lua for worker w, which sees the log's shards; then go: the
   shards it reads (Epoch.Reads), from its marks */
inline open(w) {
	if
	:: er == 0 -> er = wr[w]; eA = shards; eshards = shards; ep = 1; kept[1] = true
	:: er != 0 && er != wr[w] ->
		k = 0;
		if :: eA > 0 -> k = shards :: else -> skip fi;
		successor(wr[w], k, 0, false)
#ifndef BUG_OLD
	:: er == wr[w] && eA > 0 && shards > eA -> successor(wr[w], shards, eA, false)
#else
	:: er == wr[w] && shards > eshards -> eshards = shards   /* grown in place, aligned to the old count */
#endif
	:: else -> skip
	fi;
	wep[w] = ep; eopen = eopen | (1 << wk[w]);
	wA[w] = eA; wwas[w] = ewas;
	rd[w] = 0;
	for (s : 0 .. S - 1) {
		wcut[s * W + w] = cut[s];
		if :: s < eshards && READS(s, wk[w]) -> rd[w] = rd[w] | (1 << s); nxt[s * W + w] = MK(s, wk[w]) :: else -> skip fi
	}
}

/* lua: write.lua for a holder of an older epoch (go: the drain's write
   before it opens again): recorded there, "late", when the epoch is in the
   history; lost, "moved", when it is not */
inline flush(w) {
	if
	:: wep[w] != ep && kept[wep[w]] ->
		for (s : 0 .. S - 1) {
			for (p : 0 .. L - 1) {
				if :: dirty[w] & (1 << E(s, p)) -> rec[E(s, p)] = true :: else -> skip fi
			}
			if :: (rd[w] & (1 << s)) && nxt[s * W + w] > hi[wep[w] * S + s] -> hi[wep[w] * S + s] = nxt[s * W + w] :: else -> skip fi
		}
	:: else -> skip
	fi;
	dirty[w] = 0
}

/* every task below the current epoch's low watermark is done */
inline check() {
	assert(ep <= EPOCHS);
	x = 0;
	for (i : 1 .. EPOCHS) { if :: kept[i] -> x++ :: else -> skip fi }
	assert(x <= HISTORY);
	for (p : 0 .. S * L - 1) { assert(done[p] <= 1) }
	if
	:: er != 0 ->
		for (s : 0 .. S - 1) {
			if
			:: s < eshards ->
				low(s, lo);
				for (p : 0 .. L - 1) { assert(p >= lo || p >= nlen[s] || done[E(s, p)] > 0) }
			:: else -> skip
			fi
		}
	:: else -> skip
	fi
}

/* the scratch variables, cleared after each step so that they do not
   tell states apart */
#define CLEAR w = 0; s = 0; p = 0; i = 0; k = 0; r = 0; x = 0; lo = 0; placed = false

active proctype world() {
	byte w, s, p, i, k, r, x, lo, ns[S], nc[S];
	bool placed;
	do
	/* the log grows (a topic's new partition, a new stream) */
	:: shards == 2 -> d_step { shards = 3 }
	/* the producer switches to the new count */
	:: shards == 3 && pcount == 2 -> d_step { pcount = 3 }
	/* the producer writes an id */
	:: written < ENTRIES -> atomic {
		if :: x = 0 :: x = 3 :: x = 4 fi;
		d_step {
			s = x % pcount;
			if :: nlen[s] < L -> id[E(s, nlen[s])] = x; nlen[s]++ :: else -> skip fi;
			written++;
			check(); CLEAR
		}
	}
	/* the rogue producer puts an id in any shard */
	:: rogue < ROGUE -> atomic {
		if :: x = 0 :: x = 3 :: x = 4 fi;
		select (s : 0 .. 2);
		d_step {
			if :: s < shards && nlen[s] < L -> id[E(s, nlen[s])] = x; nlen[s]++ :: else -> skip fi;
			rogue++;
			check(); CLEAR
		}
	}
	/* a term of (k, r) begins: no live term of other replicas or of k */
	:: terms < TERMS -> atomic {
		select (w : 0 .. W - 1);
		select (r : 2 .. RM);
		select (k : 0 .. r - 1);
		d_step {
			if
			:: !live[w] && !(live[1 - w] && (wr[1 - w] != r || wk[1 - w] == k)) ->
				terms++; live[w] = true; wk[w] = k; wr[w] = r;
				open(w)
			:: else -> skip
			fi;
			check(); CLEAR
		}
	}
	:: atomic { select (w : 0 .. W - 1);
		if
		/* it opens again: a write met a new epoch (go: ErrMoved, ErrLate),
		   or its marks passed the cuts of the shards it read for them only
		   (go: pastCuts) */
		:: live[w] && (wep[w] != ep ||
			((rd[w] & 1) && !CANOWN(0, wk[w]) && cut[0] != 0 && MK(0, wk[w]) >= cut[0] - 1) ||
			((rd[w] & 2) && !CANOWN(1, wk[w]) && cut[1] != 0 && MK(1, wk[w]) >= cut[1] - 1)) ->
			d_step { flush(w); open(w); check(); CLEAR }
		/* a clean end: the drain wrote its marks */
		:: live[w] -> d_step { flush(w); live[w] = false; check(); CLEAR }
		:: else -> w = 0
		fi
	}
	/* a holder reads the next message of a shard it reads */
	:: atomic {
		select (w : 0 .. W - 1);
		select (s : 0 .. S - 1);
		d_step {
			p = nxt[s * W + w];
			if
			:: live[w] && (rd[w] & (1 << s)) && p < nlen[s] ->
				x = id[E(s, p)];
				/* go: Epoch.Placed, by the epoch it opened */
				placed = (wA[w] == 0 || s >= wA[w] || (wcut[s * W + w] != 0 && p < wcut[s * W + w] - 1) || x % wA[w] == s);
#if defined(BUG_TRUST) || defined(BUG_OLD)
				placed = true;
#endif
				if
				:: placed ->
					/* the skip rule: what a write recorded done is not done again */
					if :: x % wr[w] == wk[w] && !rec[E(s, p)] -> done[E(s, p)]++; dirty[w] = dirty[w] | (1 << E(s, p)) :: else -> skip fi;
					nxt[s * W + w] = p + 1;
					/* and writes its mark at once (lua: write.lua; never
					   backwards); on an older epoch it writes when it
					   learns of the new one (flush) */
					if
					:: wep[w] == ep ->
						for (i : 0 .. S * L - 1) { if :: dirty[w] & (1 << i) -> rec[i] = true :: else -> skip fi }
						dirty[w] = 0;
						if :: p + 1 > hi[ep * S + s] -> hi[ep * S + s] = p + 1 :: else -> skip fi;
						if :: p + 1 >= MK(s, wk[w]) -> mk[s * RM + wk[w]] = p + 1; hasMk[s * RM + wk[w]] = true :: else -> skip fi
					:: else -> skip
					fi
				:: !placed && (wep[w] != ep || (shards > eA && x % shards == s)) ->
					flush(w); open(w)  /* go: the epoch moved on (the realign is
					                      refused), or the log grew under it: open again */
#ifndef BUG_EAGER
				:: !placed && wep[w] == ep && !(shards > eA && x % shards == s) && eopen != (1 << er) - 1 ->
					skip          /* lua: realign.lua, "wait": an index has not opened the epoch */
				:: !placed && wep[w] == ep && !(shards > eA && x % shards == s) && eopen == (1 << er) - 1 && wwas[w] > 0 && s < wwas[w] && x % wwas[w] == s ->
#else
				:: !placed && wep[w] == ep && !(shards > eA && x % shards == s) && wwas[w] > 0 && s < wwas[w] && x % wwas[w] == s ->
#endif
					successor(er, eA, 0, true)    /* lua: realign.lua, "late" */
#ifndef BUG_EAGER
				:: !placed && wep[w] == ep && !(shards > eA && x % shards == s) && eopen == (1 << er) - 1 && !(wwas[w] > 0 && s < wwas[w] && x % wwas[w] == s) ->
#else
				:: !placed && wep[w] == ep && !(shards > eA && x % shards == s) && !(wwas[w] > 0 && s < wwas[w] && x % wwas[w] == s) ->
#endif
					successor(er, 0, 0, false)    /* lua: realign.lua, "misaligned" */
				fi
			:: else -> skip
			fi;
			check(); CLEAR
		}
	}
	od
}
