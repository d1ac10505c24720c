package consumer

import "github.com/nandi-go/nandi/transport"

// place is a task's place in the log.
type place struct {
	shard int
	pos   transport.Position
}

// firstTaken is when this worker first took each task a term left
// unfinished, so that a task taken again in a later term (a sticky index
// keeps its shares across a rebalance) keeps its age: the oldest
// unfinished task's age (Stats.Oldest, the metric, presence) then grows
// across rebalances instead of starting over at each. Built at the end of
// a term and never changed after: intake reads it without a lock. Past
// the highest position it holds in a shard (soon, as a term reads on),
// intake's lookup is one comparison.
type firstTaken struct {
	at  map[place]mono
	top []transport.Position // per shard, the highest position in at
	any []bool               // per shard, whether at holds one
}

// keepAges records, at the end of the term, when its unfinished tasks were
// first taken.
func (rec *recorder) keepAges() {
	m := &firstTaken{at: map[place]mono{}, top: make([]transport.Position, len(rec.shards)), any: make([]bool, len(rec.shards))}
	rec.r.view(func(*book) {
		for s, sh := range rec.shards {
			if sh == nil {
				continue // not read: the term owns nothing there
			}
			for t := sh.head; t != nil; t = t.after {
				m.at[place{s, t.pos}] = t.taken
				m.top[s], m.any[s] = t.pos, true // the list ascends
			}
		}
	})
	rec.sh.firsts.Store(m)
}

// firstTakenAt is when the task at shard s, position p was first taken by
// this worker: now, unless an earlier term left it unfinished.
func (sh *shared) firstTakenAt(s int, p transport.Position, now mono) mono {
	m := sh.firsts.Load()
	if m == nil || s >= len(m.top) || !m.any[s] || m.top[s].Less(p) {
		return now
	}
	if at, ok := m.at[place{s, p}]; ok && at < now {
		return at
	}
	return now
}
