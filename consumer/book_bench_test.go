package consumer

import (
	"testing"
	"time"

	"github.com/nandi-go/nandi/transport"
)

// BenchmarkBookCycle: the task book's own cost per task as the runner
// uses it when every attempt succeeds: a batch of 512 tasks (the spares
// the book gives again) taken (each into its id's queue and its shard's
// list), then each run (next) and settled as finished. Ids repeat every 10,000 tasks, as in the memory
// log benchmarks.
//
//	go test -run '^$' -bench BookCycle ./consumer/
func BenchmarkBookCycle(b *testing.B) {
	const batch = 512
	bk := newBook(batch, 0, false)
	bk.open([]*shardTrack{{}, {}, {}, {}}, true)
	tasks := make([]task, batch)
	ts := make([]*task, 0, batch)
	ms := make([]*transport.Message, batch)
	for i := range ms {
		ms[i] = &transport.Message{}
	}
	var now time.Time
	var pos uint64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		// As intake does: the tasks finished are given again (spares); the
		// first batch's are new.
		ts = bk.spares(ts[:0], batch)
		for j := len(ts); j < batch; j++ {
			ts = append(ts, &tasks[j])
		}
		for j, t := range ts {
			pos++
			m := ms[j]
			m.Shard, m.Position = int(pos%4), transport.Offset(pos)
			*t = task{m: m, id: pos % 10_000, shard: m.Shard, pos: m.Position}
		}
		bk.take(ts, ms)
		for t := bk.next(); t != nil; t = bk.next() {
			bk.settle(t, resHandled, now)
		}
	}
}

// BenchmarkBookTerm: what a term's book costs to make and to give back
// at the term's end, with the default MaxPending (64) and MaxWaiting
// (100,000). A book once sized its id table for MaxPending + MaxWaiting
// and cleared all of it at every term's end (4.2 MB and 2.6 ms a term);
// it is now sized for MaxPending and grows when tasks wait.
//
//	go test -run '^$' -bench BookTerm -benchmem ./consumer/
func BenchmarkBookTerm(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		bk := newBook(64, DefaultMaxWaiting, true)
		_ = bk.handBack()
	}
}
