package consumer

import (
	"time"

	"github.com/nandi-go/nandi/transport"
)

// carryKey is a task's place in the log.
type carryKey struct {
	shard int
	pos   transport.Position
}

// carried is when this worker first took each task a term left
// unfinished, so that a task taken again in a later term (a sticky index
// keeps its shares across a rebalance) keeps its age: the oldest
// unfinished task's age (Stats.Oldest, the metric, presence) then grows
// across rebalances instead of starting over at each. Built at the end of
// a term and never changed after: intake reads it without a lock. Past
// the highest position it holds in a shard (soon, as a term reads on),
// intake's lookup is one comparison.
type carried struct {
	at  map[carryKey]time.Time
	top []transport.Position // per shard, the highest position in at
	any []bool               // per shard, whether at holds one
}

// carry records, at the end of tr, when its unfinished tasks were first
// taken.
func (c *Consumer) carry(tr *term) {
	tr.mu.Lock()
	m := &carried{at: map[carryKey]time.Time{}, top: make([]transport.Position, len(tr.shards)), any: make([]bool, len(tr.shards))}
	for s, sh := range tr.shards {
		for t := sh.head; t != nil; t = t.after {
			m.at[carryKey{s, t.pos}] = t.taken
			m.top[s], m.any[s] = t.pos, true // the list ascends
		}
	}
	tr.mu.Unlock()
	c.carried.Store(m)
}

// firstTaken is when the task at shard s, position p was first taken by
// this worker: now, unless an earlier term left it unfinished.
func (c *Consumer) firstTaken(s int, p transport.Position, now time.Time) time.Time {
	m := c.carried.Load()
	if m == nil || s >= len(m.top) || !m.any[s] || m.top[s].Less(p) {
		return now
	}
	if at, ok := m.at[carryKey{s, p}]; ok && at.Before(now) {
		return at
	}
	return now
}
