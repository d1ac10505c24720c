package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/transport"
)

var errTermOver = errors.New("consumer: the term ended")

// open opens the ledger for the term and the log from its marks, retrying
// with backoff for as long as the term lasts: a held index is always
// being served, or being retried and reported (Stats.Unserved). A ledger
// that cannot be read (checkpoint.ErrCorrupt) is served not at all (its
// marks might skip work): the worker keeps its lease, keeps trying (an
// operator may repair or delete the hash), and says so at Error.
func (tr *term) open() (transport.Reader, error) {
	defer tr.sh.unserved.Store(false)
	r := ioBackoff{spell: &tr.sh.opening, count: &tr.sh.stats.openFailures}
	corrupt := ioBackoff{spell: &tr.sh.opening, count: &tr.sh.stats.corruptLedger, level: slog.LevelError}
	shrunk := ioBackoff{spell: &tr.sh.opening, count: &tr.sh.stats.openFailures, level: slog.LevelError}
	for {
		rd, err := tr.openOnce()
		if err == nil {
			r.ok(tr.taking, tr.log, "opened")
			return rd, nil
		}
		if errors.Is(err, checkpoint.ErrStale) {
			return nil, err
		}
		if errors.Is(err, checkpoint.ErrHeld) {
			// A provisional term waits for the former holders' releases
			// (their drains), or for its confirmation: no failure.
			tr.log.DebugContext(tr.ctx, "waiting for the former holders to release the checkpoints", "err", err)
			if !sleep(tr.taking, handoffPoll(tr.a.Replicas)) {
				return nil, errTermOver
			}
			continue
		}
		tr.sh.unserved.Store(true)
		var wait time.Duration
		switch {
		case errors.Is(err, checkpoint.ErrCorrupt):
			tr.sh.stats.openFailures.Add(1)
			wait = corrupt.failed(tr.taking, tr.log, "cannot serve the index held: the checkpoint ledger is corrupt; serving nothing of it, retrying while the term lasts", err)
		case errors.Is(err, checkpoint.ErrShrunk):
			wait = shrunk.failed(tr.taking, tr.log, "cannot serve the index held: this worker sees fewer shards than the group's checkpoints; serving nothing, retrying while the term lasts", err)
		default:
			wait = r.failed(tr.taking, tr.log, "cannot serve the index held: opening failed; retrying while the term lasts", err)
		}
		if !sleep(tr.taking, wait) {
			return nil, errTermOver
		}
	}
}

// openOnce describes the log again (shards added since, its ends), opens
// the ledger, and opens the log at the index's marks. A shard whose log
// ends below its mark was recreated: it is reported, and the ledger is
// opened again to start it over from its beginning, so that nothing of
// the new log is skipped.
func (tr *term) openOnce() (transport.Reader, error) {
	info, err := tr.sh.src.Info(tr.taking)
	if err != nil {
		return nil, fmt.Errorf("describing the source: %w", err)
	}
	if !info.Log {
		return nil, fmt.Errorf("the source is no longer a log")
	}
	info.Shards = max(info.Shards, 1)
	origin := make([]transport.Position, info.Shards)
	if tr.sh.opts.StartAtEnd {
		copy(origin, info.Ends)
	}
	opener, subset := tr.sh.src.(transport.ShardOpener)
	req := checkpoint.OpenRequest{Replicas: tr.a.Replicas, Index: tr.a.Index, Token: tr.a.Token, Origin: origin,
		Aligned: info.Aligned && subset, Ends: info.Ends, Provisional: tr.t.Provisional()}
	req.Seen, req.SeenStart = tr.sh.seenEpoch()
	st, err := tr.sh.ledger.Open(tr.taking, req)
	if err != nil {
		return nil, err
	}
	from := st.From(tr.a.Index)
	for s, p := range from {
		if s < len(info.Ends) && info.Ends[s].Less(p) {
			req.Rewound = append(req.Rewound, s)
			req.Origin[s] = transport.Position{} // all of the new log
		}
	}
	if len(req.Rewound) > 0 {
		tr.sh.stats.rewinds.Add(int64(len(req.Rewound)))
		tr.log.WarnContext(tr.ctx, "the log went back below the checkpoints (deleted and created again?): reading those shards again from their start; nothing of the new log is skipped",
			"shards", req.Rewound, "ends", info.Ends, "checkpoints", from)
		if st, err = tr.sh.ledger.Open(tr.taking, req); err != nil {
			return nil, err
		}
		from = st.From(tr.a.Index)
	}
	tr.noteLedger(req, st)
	tr.sh.writeLog(tr.taking, info)
	tr.sh.finished.prune(from, req.Rewound)
	tr.redo = openRedo(st, info.Ends)
	if tr.redo != nil && tr.redo.un == nil {
		tr.log.WarnContext(tr.ctx, "taking over what a former holder may have done: tasks up to the log's end now may run twice; they are counted (Stats.Redone) and listed when the term ends",
			"why", tr.redo.why, "from", from, "ends", info.Ends)
	} else if tr.redo != nil {
		tr.log.WarnContext(tr.ctx, "taking over what a former holder may have done: its tasks up to the log's end when the epoch was made may run twice; they are counted (Stats.Redone) and listed when the term ends",
			"why", tr.redo.why, "replicas", tr.redo.un.Replicas, "indexes", tr.redo.un.Indexes, "ends", tr.redo.un.Ends)
	}
	// The shards to read: on an aligned log, those the index can own tasks
	// in, and those whose cut (where the log grew) its mark is below: what
	// lies below a cut was placed by an older count, and every index reads
	// it (checkpoint.Epoch.Reads).
	var read []int
	shards := make([]*shardTrack, len(from))
	for s, p := range from {
		if !req.Aligned || st.Current.Reads(s, tr.a.Index) {
			read = append(read, s)
			shards[s] = &shardTrack{next: p, written: st.Current.Mark(s, tr.a.Index)}
		}
	}
	var r transport.Reader
	if req.Aligned {
		r, err = opener.OpenShards(tr.taking, from, read)
	} else {
		r, err = tr.sh.src.Open(tr.taking, from)
	}
	if err != nil {
		return nil, fmt.Errorf("opening the source: %w", err)
	}
	tr.info, tr.st = info, st
	tr.fencedEpoch.Store(st.Current.Fenced)
	if req.Provisional {
		tr.sh.stats.fencedHandoffs.Add(1)
	}
	tr.setShards(shards)
	tr.rec.opened(st, shards, tr.redo)
	return r, nil
}

// subscribe opens an aligned source that is not a log (NATS core with a
// subject per shard) for the term: the shards its lease can own ids in
// only, retrying while the term lasts.
func (tr *term) subscribe() (transport.Reader, error) {
	defer tr.sh.unserved.Store(false)
	r := ioBackoff{spell: &tr.sh.opening, count: &tr.sh.stats.openFailures}
	read := tr.a.ShardsOf(tr.info.Shards)
	if tr.sh.misaligned.Load() {
		read, tr.allShards = make([]int, tr.info.Shards), true
		for s := range read {
			read[s] = s
		}
	}
	shards := make([]*shardTrack, tr.info.Shards)
	for _, s := range read {
		shards[s] = &shardTrack{}
	}
	for {
		rd, err := tr.sh.src.(transport.ShardOpener).OpenShards(tr.taking, nil, read)
		if err == nil {
			r.ok(tr.taking, tr.log, "opened")
			tr.setShards(shards)
			return rd, nil
		}
		tr.sh.unserved.Store(true)
		if !r.wait(tr.taking, tr.log, "cannot serve the index held: subscribing failed; retrying while the term lasts", err) {
			return nil, errTermOver
		}
	}
}

// seenEpoch is the newest checkpoint epoch this worker has seen, and its
// start.
func (sh *shared) seenEpoch() (int64, []transport.Position) {
	sh.seenMu.Lock()
	defer sh.seenMu.Unlock()
	return sh.seen, sh.seenStart
}

// noteLedger remembers the newest epoch this worker has seen, so that a
// ledger lost later is recreated from its start rather than from the
// origin, and reports a ledger that was lost or behind.
func (tr *term) noteLedger(req checkpoint.OpenRequest, st *checkpoint.State) {
	if st.Lost || st.Behind {
		tr.sh.stats.ledgerLosses.Add(1)
		tr.log.WarnContext(tr.ctx, "checkpoint ledger lost or behind: its store lost writes (eviction, flush, failover); work since may be done again, none is skipped",
			"seen_epoch", req.Seen, "epoch", st.Current.N, "lost", st.Lost, "behind", st.Behind)
	}
	tr.sh.seenMu.Lock()
	defer tr.sh.seenMu.Unlock()
	if st.Current.N >= tr.sh.seen {
		tr.sh.seen, tr.sh.seenStart = st.Current.N, slices.Clone(st.Current.Start)
	}
}

// watchShards describes the log every DescribeInterval while the term is
// taken, and stops the term's intake when
// the log has more shards than it was opened with: serve then drains and
// opens it again under the same term. A failure to describe is left to
// the next look (the reader open meanwhile reports its own errors).
func (tr *term) watchShards() {
	tick := time.NewTicker(tr.sh.opts.DescribeInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-tr.taking.Done():
			return
		case <-tr.done:
			return
		}
		info, err := tr.sh.src.Info(tr.taking)
		if err == nil && info.Shards > len(tr.shards) {
			tr.grew.Store(int64(info.Shards))
			tr.stop()
			return
		}
	}
}

// writeLog records what the group reads beside the default ledger
// (checkpoint.WriteLog), when it changed: what nandi scaler and nandi
// status count the group's backlog from, with no worker running. A
// failure is said and tried again at the next term; it stops nothing.
func (sh *shared) writeLog(ctx context.Context, info transport.Info) {
	if _, ok := sh.ledger.(*checkpoint.Redis); !ok || sh.client == nil {
		return
	}
	l := checkpoint.LogOf(info)
	if last := sh.logWritten.Load(); last != nil && last.Equal(l) {
		return
	}
	if err := checkpoint.WriteLog(ctx, sh.client, sh.group, l); err != nil {
		sh.log.WarnContext(ctx, "cannot record what the group reads beside its ledger (nandi scaler counts its backlog from it); trying again at the next term", "err", err)
		return
	}
	sh.logWritten.Store(&l)
}
