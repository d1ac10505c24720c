package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
)

// handOver stops the term's taking once every index is ready to hand
// over (recorder.awaitReady).
func (tr *term) handOver() {
	if tr.rec.awaitReady(tr.taking) {
		tr.stop()
	}
}

// awaitReady is the fenced handoff's first phase, for a term kept to its
// cap because the group changed: it tells the ledger this index is ready
// to hand over, and looks again until every index the epoch holds is
// ready (true: the term stops taking, and the drain releases the index
// with its last marks). While some index is not ready (its holder killed,
// stopped, or not yet registered since the change), the term serves on,
// to its cap at most: a holder that never comes does not leave the
// others' shares unserved for a handoff that cannot happen. It returns
// false when the epoch or the index moved on (the term ends on its own)
// or taking ended.
func (rec *recorder) awaitReady(taking context.Context) bool {
	req := checkpoint.ReadyRequest{Epoch: rec.st.Current.N, Token: rec.a.Token, Index: rec.a.Index, Replicas: rec.a.Replicas}
	for {
		ctx, cancel := context.WithTimeout(taking, rec.sh.interval)
		ready, held, err := rec.sh.ledger.Ready(ctx, req)
		cancel()
		switch {
		case errors.Is(err, checkpoint.ErrMoved) || errors.Is(err, checkpoint.ErrFenced):
			return false
		case err == nil && ready >= held:
			rec.log.DebugContext(rec.ctx, "every index ready to hand over: draining", "held", held)
			return true
		}
		if !sleep(taking, handoffPoll(rec.a.Replicas)) {
			return false
		}
	}
}

// handoffPoll is how often a term looks at the ledger during a fenced
// handoff (readiness, or a provisional open held): a few milliseconds in
// a small group, a tenth of a millisecond per worker in a large one, so
// that a group of 1,000 makes about 10,000 calls a second on the store
// for the moments a handoff lasts.
func handoffPoll(replicas int) time.Duration {
	return max(5*time.Millisecond, time.Duration(replicas)*100*time.Microsecond)
}
