package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

// ErrGroupRunning is returned by Reset while a lease of the group may
// still be held: a worker registered within the last three intervals.
var ErrGroupRunning = errors.New("checkpoint: the group is running")

// ErrNoLedger is returned by Reset for a group with no checkpoints yet.
var ErrNoLedger = errors.New("checkpoint: the group has no checkpoints")

// Reset is what Redis.Reset did, or would do (dry run).
type Reset struct {
	From   *Epoch               // the epoch replaced
	N      int64                // the epoch created (or that would be)
	To     []transport.Position // where each shard starts again
	At     time.Time            // when (zero for a dry run)
	DryRun bool                 // nothing was changed
}

// Moves describes, per shard and index, what the reset skips or redoes:
// tasks at or after To and before the index's mark are done again;
// tasks from the mark up to To are skipped, finished or not.
func (r *Reset) Moves() []string {
	var out []string
	e := r.From
	for s := range e.Start {
		for k := range e.R {
			if !e.CanOwnIn(s, k) {
				continue
			}
			m, to := e.Mark(s, k), r.To[s]
			switch {
			case to.Less(m.Low):
				done := ""
				if m.Low.Less(m.High) {
					done = fmt.Sprintf(", and what it finished from %v to %v (%d unfinished there)", m.Low, m.High, len(m.Undone))
				}
				out = append(out, fmt.Sprintf("shard %d, index %d of %d: redo from %v to %v%s", s, k, e.R, to, m.Low, done))
			case m.Low.Less(to):
				out = append(out, fmt.Sprintf("shard %d, index %d of %d: skip from %v to %v (%d listed unfinished there)", s, k, e.R, m.Low, to, countBefore(m.Undone, to)+boolInt(m.Low.Less(to))))
			default:
				out = append(out, fmt.Sprintf("shard %d, index %d of %d: at %v already", s, k, e.R, to))
			}
		}
	}
	return out
}

func countBefore(ps []transport.Position, p transport.Position) (n int) {
	for _, x := range ps {
		if x.Less(p) {
			n++
		}
	}
	return n
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Reset moves every index of the group to the positions to (to[s] for
// shard s; one position: every shard), as a new epoch with no history:
// nothing before to is skipped for having been done, nothing after it
// is read. It refuses while a lease of the group may be held
// (ErrGroupRunning: stop the workers, and wait three intervals after the
// last one stopped); a worker that registers meanwhile makes it fail, not
// race (the lease's and the ledger's keys are watched). With dryRun it
// changes nothing and says what it would do.
func (l *Redis) Reset(ctx context.Context, to []transport.Position, dryRun bool) (*Reset, error) {
	var res *Reset
	err := l.c.Watch(ctx, func(tx *redis.Tx) error {
		g, err := partition.ReadGroup(ctx, tx, l.group)
		switch {
		case errors.Is(err, partition.ErrNoGroup):
		case err != nil:
			return err
		default:
			for _, c := range g.Counts {
				if c.Interval >= g.Current-2 && c.Count > 0 {
					return fmt.Errorf("%w: %d workers registered in interval %d (now %d): stop every worker of %s and run this again three intervals (%v) after the last one stopped",
						ErrGroupRunning, c.Count, c.Interval, g.Current, l.group, 3*g.Interval)
				}
			}
		}
		raw, err := readScript.Run(ctx, tx, []string{l.key}).Slice()
		if err != nil {
			return fmt.Errorf("checkpoint: reset: %w", err)
		}
		st, err := parse(raw)
		if err != nil {
			return err
		}
		if st.Current == nil {
			return fmt.Errorf("%w: %s (nothing to reset: a group with no checkpoints starts at its origin)", ErrNoLedger, l.group)
		}
		e := st.Current
		shards := len(e.Start)
		switch len(to) {
		case 1:
			all := make([]transport.Position, shards)
			for s := range all {
				all[s] = to[0]
			}
			to = all
		case shards:
		default:
			return fmt.Errorf("checkpoint: reset: %d positions for %d shards: give one for every shard, or one for all", len(to), shards)
		}
		res = &Reset{From: e, N: e.N + 1, To: to, DryRun: dryRun}
		if dryRun {
			return nil
		}
		res.At = time.Now().UTC()
		n := strconv.FormatInt(res.N, 10)
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, l.key)
			fields := []any{"v", "2", n + ":r", e.R, n + ":tok", e.Token, n + ":shards", shards, n + ":aligned", e.Aligned,
				n + ":reset", res.At.UnixMilli(), "cur", n, "hist", n}
			for s, p := range to {
				fields = append(fields, n+":start:"+strconv.Itoa(s), encode(p))
			}
			p.HSet(ctx, l.key, fields...)
			return nil
		})
		return err
	}, partition.Key(l.group), l.key)
	if errors.Is(err, redis.TxFailedErr) {
		return nil, fmt.Errorf("%w: a worker registered or the ledger changed while resetting; stop every worker and run this again", ErrGroupRunning)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}
