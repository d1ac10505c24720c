package consumer_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
)

// window measures the per-message cost from the first handled message to
// the last: time and heap allocations, read from the handler itself.
type window struct {
	n           int64
	seen        atomic.Int64
	start, end  time.Time
	mallocs0, m uint64
	done        chan struct{}
}

func newWindow(n int) *window { return &window{n: int64(n), done: make(chan struct{})} }

func (w *window) tick() {
	switch w.seen.Add(1) {
	case 1:
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		w.mallocs0, w.start = ms.Mallocs, time.Now()
	case w.n:
		w.end = time.Now()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		w.m = ms.Mallocs - w.mallocs0
		close(w.done)
	}
}

func (w *window) perMsg() (time.Duration, float64) {
	return w.end.Sub(w.start) / time.Duration(w.n-1), float64(w.m) / float64(w.n-1)
}

// consumeWindow runs one worker that owns everything over a pre-filled
// memory log and returns the per-message cost in the window.
func consumeWindow(tb testing.TB, log *memory.Log, n int, opts consumer.Options) (time.Duration, float64) {
	w := newWindow(n)
	h := func(context.Context, *transport.Message) error { w.tick(); return nil }
	l, err := partition.New(server(tb).Client(), partition.Options{Name: fmt.Sprintf("speed-%d", time.Now().UnixNano()), Interval: time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	c, err := consumer.New(l, log.Source(), h, opts)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	end := make(chan error, 1)
	go func() { end <- c.Run(ctx) }()
	<-w.done
	cancel()
	<-end
	return w.perMsg()
}

// plainWindow is the loop a user would write over the same log: fetch,
// call the handler, per message.
func plainWindow(log *memory.Log, n int) (time.Duration, float64) {
	w := newWindow(n)
	r, _ := log.Source().Open(context.Background(), nil)
	defer r.Close()
	ctx := context.Background()
	for w.seen.Load() < int64(n) {
		ms, _ := r.Fetch(ctx)
		for _, m := range ms {
			_ = m
			w.tick()
		}
	}
	return w.perMsg()
}

// BenchmarkMemoryLogPerMessage: the consumer's own cost per message over
// the memory log (a no-op handler, one worker owning everything), beside
// the plain loop, with allocations.
//
//	go test -run '^$' -bench MemoryLogPerMessage -benchtime 1x ./consumer/
func BenchmarkMemoryLogPerMessage(b *testing.B) {
	const n = 300_000
	for range b.N {
		pt, pa := plainWindow(fill(n, 10_000), n)
		for _, conc := range []int{1, 8} {
			ct, ca := consumeWindow(b, fill(n, 10_000), n, consumer.Options{Concurrency: conc})
			fmt.Printf("memory log, Concurrency %d: %v/msg %.2f allocs/msg; plain loop %v/msg %.2f allocs/msg; %.2fx\n",
				conc, ct, ca, pt, pa, float64(ct)/float64(pt))
		}
	}
}

// BenchmarkInlineOnly: the per-message cost at Concurrency 1 alone, over
// a million messages, for a profile of the path a task takes on intake's
// goroutine (the plain loop is in MemoryLogPerMessage):
//
//	go test -run '^$' -bench InlineOnly -benchtime 1x -cpuprofile cpu.out ./consumer/
func BenchmarkInlineOnly(b *testing.B) {
	const n = 1_000_000
	log := fill(n, 10_000)
	b.ResetTimer()
	ct, ca := consumeWindow(b, log, n, consumer.Options{})
	fmt.Printf("inline: %v/msg %.2f allocs/msg\n", ct, ca)
}
