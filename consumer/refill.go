package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/nandi-go/nandi/transport"
)

// refillBatch is the most light tasks one Reread reads again.
const refillBatch = 64

// refill reads light task t's message again (it waited behind its id's
// failing first task as its place in the log only), with the light tasks
// right behind it in its shard, in one Reread. ok is false when it could
// not: the term stopped taking (leave), or the read failed (again, at the
// wait returned: the id waits, as a failed fetch would, and nothing is
// counted against the task). A position the log no longer has becomes a
// permanent failure of its task (DeadLetter, or skipped and counted),
// never a silent loss.
func (a *attempts) refill(t *task) (v result, wait time.Duration, ok bool) {
	var ts []*task
	a.book(func(b *book) { ts = b.lightRun(t, refillBatch) })
	pos := make([]transport.Position, len(ts))
	for i, u := range ts {
		pos[i] = u.pos
	}
	ctx, cancel := context.WithTimeout(a.taking, a.sh.interval)
	ms, err := a.sh.src.(transport.Rereader).Reread(ctx, t.shard, pos)
	cancel()
	if err == nil && len(ms) != len(pos) {
		err = fmt.Errorf("consumer: Reread of %d positions returned %d messages (a transport bug)", len(pos), len(ms))
	}
	a.rereadMu.Lock()
	defer a.rereadMu.Unlock()
	if err != nil {
		if a.taking.Err() != nil {
			return resLeave, 0, false
		}
		wait := a.reread.failed(a.taking, a.log, "reading waiting tasks again failing; retrying", err, "shard", t.shard, "position", t.pos.String())
		return resRetry, wait, false
	}
	a.reread.ok(a.taking, a.log, "fetch recovered")
	for i, m := range ms {
		if m == nil || m.Shard != t.shard || m.Position != pos[i] {
			m = transport.Gone(t.shard, pos[i], fmt.Sprintf("shard %d position %v (Reread returned another message: a transport bug)", t.shard, pos[i]))
			ms[i] = m
		}
		if m.Err != nil && ts[i].err == nil {
			ts[i].err = Permanent(m.Err)
		}
	}
	a.sh.stats.reread.Add(int64(len(ms)))
	a.book(func(b *book) { b.refilled(ts, ms) })
	return 0, 0, true
}
