package integration

import (
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"testing"

	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/redis/go-redis/v9"
)

// BenchmarkJoinPhaseFigures: the time from a worker's start to a fully
// assigned group, by the phase of the server's interval at which it
// starts (a group of 12 at 300ms, median and most of 5 trials a phase).
// A join counted in the interval it starts in is fully assigned two
// intervals after that interval's registrations, so the figure falls from
// about 2.1 at phase 0 toward 1.3 late in the window; a start after the
// window has closed waits for the next one.
//
//	go test -run '^$' -bench JoinPhaseFigures -benchtime 1x ./integration/
func BenchmarkJoinPhaseFigures(b *testing.B) {
	srv := redistest.Start(b)
	client := srv.Client(func(o *redis.Options) { o.PoolSize = 64 })
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	const n, trials = 12, 5
	iv := 300 * time.Millisecond
	fmt.Fprintf(tw, "join at a phase, %s, %d workers, %v\tmedian\tmost\n", time.Now().UTC().Format("2006-01-02"), n, iv)
	g := &benchGroup{opts: partition.Options{Name: fmt.Sprintf("phase-%d", time.Now().UnixNano()), Interval: iv}, c: client}
	g.add(n)
	defer g.stop()
	if took, _ := g.untilSettled(time.Millisecond, 10*iv, 0); took < 0 {
		b.Fatal("the group did not settle")
	}
	for _, phase := range []float64{0.05, 0.3, 0.6, 0.8, 0.85, 0.9, 0.95} {
		var xs []float64
		for range trials {
			time.Sleep(3 * iv)
			serverPhase(client, iv, phase)
			g.add(1)
			took, _ := g.untilSettled(time.Millisecond, 10*iv, 0)
			if took < 0 {
				b.Fatalf("phase %.2f: not fully assigned in 10 intervals", phase)
			}
			xs = append(xs, took.Seconds()/iv.Seconds())
			g.remove(1)
			if took, _ := g.untilSettled(time.Millisecond, 10*iv, 0); took < 0 {
				b.Fatal("the group did not settle after the leave")
			}
		}
		med, most := stats(xs)
		fmt.Fprintf(tw, "phase %.2f\t%.2f\t%.2f\n", phase, med, most)
	}
	for range b.N {
	}
}
