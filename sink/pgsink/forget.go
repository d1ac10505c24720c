package pgsink

import (
	"context"
	"time"
)

// forget raises the watermark in PostgreSQL to the group's low watermark
// in its checkpoint ledger, and forgets the records below the watermark
// it raised the time before. That raise committed at least ForgetEvery
// ago (the time is taken after it commits), and ForgetEvery is at least
// BatchTimeout: a claim whose statement began before the raise (and so
// does not see it) has ended by then, and every later claim sees the
// watermark instead of the records.
func (s *Sink) forget() {
	if s.opts.Checkpoints == nil {
		return
	}
	if !s.forgetMu.TryLock() { // another batch's leader is at it
		return
	}
	defer s.forgetMu.Unlock()
	if time.Since(s.lastForget) < s.opts.ForgetEvery {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.BatchTimeout)
	defer cancel()
	for shard, below := range s.raised {
		tag, err := s.pool.Exec(ctx, s.q.forget, s.opts.Group, shard, below.hi, below.lo)
		if err != nil {
			s.log.Warn("forgetting done records failed; kept for the next time", "shard", shard, "err", err)
			continue
		}
		s.stats.forgotten.Add(tag.RowsAffected())
	}
	s.raised = map[int]position{}
	st, err := s.opts.Checkpoints.ReadLow(ctx)
	if err != nil || st.Current == nil {
		s.lastForget = time.Now()
		return
	}
	for shard := range st.Current.Start {
		low := encode(st.Current.Low(shard))
		if _, err := s.pool.Exec(ctx, s.q.raise, s.opts.Group, shard, low.hi, low.lo); err != nil {
			s.log.Warn("raising the watermark failed", "shard", shard, "err", err)
			continue
		}
		s.raised[shard] = low
	}
	s.lastForget = time.Now() // after the raises committed
}
