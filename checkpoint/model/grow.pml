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
 * Properties, asserted after every step:
 *  nothing is skipped: every task of the current epoch's shard s below
 *    its low watermark there is done (the low watermark is what a log
 *    trims below, what a sink takes as done, and where a new epoch
 *    starts);
 *  realigning ends: every epoch has a cause (a term of other replicas,
 *    the growth, a late entry, the first misplaced one), so there are at
 *    most EPOCHS of them.
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
#define E(s, p) ((s) * L + (p))
/* each epoch has a cause: a term of other replicas, the growth, a late
   entry, the first misplaced one */
#define EPOCHS (TERMS + 1 + ENTRIES + ROGUE + 1)

/* The log */
byte shards = 2;       /* the log's shards */
byte pcount = 2;       /* the producer's count */
byte nlen[S];
byte id[S * L];
bool done[S * L];
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
	if :: grown > 0 -> ewas = grown :: else -> skip fi;
	er = nr; eA = nA; ep++;
	eshards = (shards > eshards -> shards : eshards);
	for (s : 0 .. S - 1) {
		start[s] = ns[s]; cut[s] = nc[s]; ns[s] = 0; nc[s] = 0;
		for (i : 0 .. RM - 1) { hasMk[s * RM + i] = false; mk[s * RM + i] = 0 }
	}
}

/* lua: open.lua for worker w, which sees the log's shards; then go: the
   shards it reads (Epoch.Reads), from its marks */
inline open(w) {
	if
	:: er == 0 -> er = wr[w]; eA = shards; eshards = shards; ep = 1
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
	wep[w] = ep;
	rd[w] = 0;
	for (s : 0 .. S - 1) {
		if :: s < eshards && READS(s, wk[w]) -> rd[w] = rd[w] | (1 << s); nxt[s * W + w] = MK(s, wk[w]) :: else -> skip fi
	}
}

/* every task below the current epoch's low watermark is done */
inline check() {
	assert(ep <= EPOCHS);
	if
	:: er != 0 ->
		for (s : 0 .. S - 1) {
			if
			:: s < eshards ->
				low(s, lo);
				for (p : 0 .. L - 1) { assert(p >= lo || p >= nlen[s] || done[E(s, p)]) }
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
			d_step { open(w); check(); CLEAR }
		/* a clean end: the drain wrote its marks */
		:: live[w] -> d_step { live[w] = false; w = 0 }
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
			:: live[w] && wep[w] == ep && (rd[w] & (1 << s)) && p < nlen[s] ->
				x = id[E(s, p)];
				/* go: Epoch.Placed */
				placed = (eA == 0 || s >= eA || (cut[s] != 0 && p < cut[s] - 1) || x % eA == s);
#if defined(BUG_TRUST) || defined(BUG_OLD)
				placed = true;
#endif
				if
				:: placed ->
					if :: x % wr[w] == wk[w] -> done[E(s, p)] = true :: else -> skip fi;
					/* and writes its mark (lua: write.lua; never backwards) */
					nxt[s * W + w] = p + 1;
					if :: p + 1 >= MK(s, wk[w]) -> mk[s * RM + wk[w]] = p + 1; hasMk[s * RM + wk[w]] = true :: else -> skip fi
				:: !placed && shards > eA && x % shards == s ->
					open(w)       /* go: the log grew under it: open again */
				:: !placed && !(shards > eA && x % shards == s) && ewas > 0 && s < ewas && x % ewas == s ->
					successor(er, eA, 0, true)    /* lua: realign.lua, "late" */
				:: !placed && !(shards > eA && x % shards == s) && !(ewas > 0 && s < ewas && x % ewas == s) ->
					successor(er, 0, 0, false)    /* lua: realign.lua, "misaligned" */
				fi
			:: else -> skip
			fi;
			check(); CLEAR
		}
	}
	od
}
