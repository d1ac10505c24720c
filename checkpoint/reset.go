package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	// Running says, for a dry run of a group that runs, why the reset
	// itself would be refused (ErrGroupRunning's message); empty
	// otherwise.
	Running string
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

// ResetOptions says where the group's lease is, and whether to change
// anything.
type ResetOptions struct {
	// Lease is the client of the Redis that holds the group's lease
	// (partition.Key): Reset refuses while a lease may be held there. Nil:
	// the ledger's own client, and then a group with no lease there is
	// refused (ErrLeaseUnknown), since its lease may live on another Redis
	// (consumer.Options.Checkpoints) and be held. Give the ledger's own
	// client here to say that the lease lives beside it: a group with no
	// lease there has been stopped for over ten intervals.
	Lease redis.UniversalClient
	// DryRun changes nothing and says what a reset would do (Reset.Moves),
	// also while the group runs (Reset.Running then says why the reset
	// itself would be refused).
	DryRun bool
}

// ErrLeaseUnknown is returned by Reset when the ledger's Redis has no
// lease of the group and ResetOptions.Lease does not say where it is.
var ErrLeaseUnknown = errors.New("checkpoint: the group's lease was not found beside its ledger")

// Reset moves every index of the group to the positions to (to[s] for
// shard s; one position: every shard), as a new epoch with no history:
// nothing before to is skipped for having been done, nothing after it
// is read. It refuses while a lease of the group may be held
// (ErrGroupRunning: stop the workers, and wait three intervals after the
// last one stopped), and when it cannot see the lease (ErrLeaseUnknown);
// a worker that registers meanwhile makes it fail, not race (with the
// lease beside the ledger, the lease's and the ledger's keys are watched;
// with the lease on another Redis, the reset must land within an
// interval of the lease's check, since a worker's first lease comes two
// intervals after its first registration). With opts.DryRun it changes
// nothing and says what it would do, whether the group runs or not.
func (l *Redis) Reset(ctx context.Context, to []transport.Position, opts ResetOptions) (*Reset, error) {
	if l.c == nil {
		return nil, errors.New("checkpoint: Reset watches the ledger's keys: it needs a ledger made by NewRedis")
	}
	st, err := l.Read(ctx)
	if err != nil {
		return nil, err
	}
	if st.Current == nil {
		return nil, fmt.Errorf("%w: %s (nothing to reset: a group with no checkpoints starts at its origin)", ErrNoLedger, l.group)
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
		return nil, fmt.Errorf("checkpoint: reset: %d positions for %d shards: give one for every shard, or one for all", len(to), shards)
	}
	res := &Reset{From: e, N: e.N + 1, To: to, DryRun: opts.DryRun}
	lease, beside := opts.Lease, opts.Lease == nil || opts.Lease == l.c
	if lease == nil {
		lease = l.c
	}
	// checkLease reads the lease; it returns how long a reset may take
	// after it (a new worker's first lease comes two intervals after its
	// first registration).
	checkLease := func(c redis.Cmdable) (time.Duration, error) {
		g, err := partition.ReadGroup(ctx, c, l.group)
		switch {
		case errors.Is(err, partition.ErrNoGroup) && opts.Lease == nil:
			return 0, fmt.Errorf("%w: no lease of %s on the ledger's Redis: either the group stopped over ten intervals ago, or its lease lives on another Redis (consumer.Options.Checkpoints) and may be held; say where the lease is (ResetOptions.Lease; nandi checkpoint reset -redis is the lease's Redis, -checkpoints the ledger's)",
				ErrLeaseUnknown, l.group)
		case errors.Is(err, partition.ErrNoGroup):
			return partition.MinInterval, nil
		case err != nil:
			return 0, err
		}
		for _, c := range g.Counts {
			if c.Interval >= g.Current-2 && c.Count > 0 {
				return 0, fmt.Errorf("%w: %d workers registered in interval %d (now %d): stop every worker of %s and run this again three intervals (%v) after the last one stopped",
					ErrGroupRunning, c.Count, c.Interval, g.Current, l.group, 3*g.Interval)
			}
		}
		return g.Interval, nil
	}
	if opts.DryRun {
		if _, err := checkLease(lease); errors.Is(err, ErrGroupRunning) {
			res.Running = err.Error()
		} else if err != nil {
			return nil, err
		}
		return res, nil
	}
	watched := slices.Clone(l.keys)
	if beside {
		watched = append(watched, partition.Key(l.group))
	}
	err = l.c.Watch(ctx, func(tx *redis.Tx) error {
		var c redis.Cmdable = lease
		if beside {
			c = tx
		}
		checked := time.Now()
		within, err := checkLease(c)
		if err != nil {
			return err
		}
		cur, err := tx.HGet(ctx, l.keys[0], "cur").Result()
		if err != nil || cur != strconv.FormatInt(e.N, 10) {
			return redis.TxFailedErr // the ledger changed since it was read
		}
		if !beside && time.Since(checked) > within/2 {
			return fmt.Errorf("%w: the reset took too long after the lease's check; run it again", ErrGroupRunning)
		}
		res.At = time.Now().UTC()
		n := strconv.FormatInt(res.N, 10)
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Unlink(ctx, l.keys...)
			fields := []any{"v", "3", n + ":r", e.R, n + ":tok", e.Token, n + ":shards", shards, n + ":aligned", e.Aligned,
				n + ":why", "reset", n + ":reset", res.At.UnixMilli(), "cur", n, "hist", n}
			for s, p := range to {
				sf := strconv.Itoa(s)
				fields = append(fields, n+":start:"+sf, encode(p), n+":wait:"+sf, owners(e.Aligned, e.R, s))
			}
			p.HSet(ctx, l.keys[0], fields...)
			return nil
		})
		return err
	}, watched...)
	if errors.Is(err, redis.TxFailedErr) {
		return nil, fmt.Errorf("%w: a worker registered or the ledger changed while resetting; stop every worker and run this again", ErrGroupRunning)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// owners is how many indexes of r can own tasks of shard s of a log
// aligned to a shards (0: not aligned): common.lua's owners.
func owners(a, r, s int) int {
	if a == 0 || s >= a {
		return r
	}
	g := gcd(a, r)
	return (r-1-s%g)/g + 1
}
