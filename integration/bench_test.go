package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/redis/go-redis/v9"
)

// benchGroup is a group of leases on one shared client, measured from
// outside through Current().
type benchGroup struct {
	opts partition.Options
	c    redis.UniversalClient
	ws   []*benchWorker
}

type benchWorker struct {
	l      *partition.Lease
	cancel context.CancelFunc
	done   chan error
}

func (g *benchGroup) add(n int) {
	for range n {
		l, err := partition.New(g.c, g.opts)
		if err != nil {
			panic(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		w := &benchWorker{l: l, cancel: cancel, done: make(chan error, 1)}
		go func() { w.done <- l.Run(ctx) }()
		g.ws = append(g.ws, w)
	}
}

func (g *benchGroup) remove(n int) {
	for _, w := range g.ws[len(g.ws)-n:] {
		w.cancel()
		<-w.done
	}
	g.ws = g.ws[:len(g.ws)-n]
}

func (g *benchGroup) settled() bool {
	seen := make(map[int]bool, len(g.ws))
	for _, w := range g.ws {
		a, ok := w.l.Current()
		if !ok || a.Replicas != len(g.ws) || seen[a.Index] {
			return false
		}
		seen[a.Index] = true
	}
	return true
}

// untilSettled polls every step and returns the time to a complete
// partition and the summed time the first k workers (those that were
// holding before the change) held nothing meanwhile.
func (g *benchGroup) untilSettled(step, limit time.Duration, k int) (took, idle time.Duration) {
	start := time.Now()
	last := start
	for !g.settled() {
		if time.Since(start) > limit {
			return -1, idle
		}
		time.Sleep(step)
		now := time.Now()
		for _, w := range g.ws[:min(k, len(g.ws))] {
			if _, ok := w.l.Current(); !ok {
				idle += now.Sub(last)
			}
		}
		last = now
	}
	return time.Since(start), idle
}

func (g *benchGroup) stop() { g.remove(len(g.ws)) }

func stats(xs []float64) (median, maxv float64) {
	slices.Sort(xs)
	return xs[len(xs)/2], xs[len(xs)-1]
}

// settledCalls measures a settled group for k intervals: script calls,
// registrations, retries and misses per worker per interval, from the
// leases' own counts.
func (g *benchGroup) settledCalls(iv time.Duration, k int) (calls, regs, retries, misses float64) {
	sum := func() (c, r, t, m int64) {
		for _, w := range g.ws {
			s := w.l.Stats()
			c, r, t, m = c+s.Calls, r+s.Registrations, t+s.Retries, m+s.Misses
		}
		return
	}
	c0, r0, t0, m0 := sum()
	time.Sleep(time.Duration(k) * iv)
	c1, r1, t1, m1 := sum()
	d := float64(len(g.ws) * k)
	return float64(c1-c0) / d, float64(r1-r0) / d, float64(t1-t0) / d, float64(m1-m0) / d
}

// serverPhase sleeps until the server's clock is at phase (a fraction) of
// an interval.
func serverPhase(c redis.UniversalClient, iv time.Duration, phase float64) {
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		return
	}
	off := time.Duration(now.UnixNano() % int64(iv))
	want := time.Duration(phase * float64(iv))
	d := want - off
	if d < 0 {
		d += iv
	}
	time.Sleep(d)
}

// BenchmarkLeaseFigures prints the lease's figures on a real redis-server:
//
//	go test -run '^$' -bench LeaseFigures -benchtime 1x ./integration/
//
// (make bench). Set NANDI_BENCH_BIG=0 to leave out the 1,000-worker run.
// A figure that did not happen within its bound prints as such, never as
// a number.
func BenchmarkLeaseFigures(b *testing.B) {
	srv := redistest.Start(b)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "lease, %s\tworkers\tinterval\ttrials\tmedian\tmax\n", time.Now().UTC().Format("2006-01-02"))
	row := func(name string, n int, iv time.Duration, xs []float64) {
		var ok []float64
		for _, x := range xs {
			if x >= 0 {
				ok = append(ok, x)
			}
		}
		if len(ok) < len(xs) {
			fmt.Fprintf(tw, "%s\t%d\t%v\t%d\tnot settled in 10 intervals in %d of %d trials\t\n", name, n, iv, len(xs), len(xs)-len(ok), len(xs))
			return
		}
		med, mx := stats(ok)
		fmt.Fprintf(tw, "%s\t%d\t%v\t%d\t%.2f\t%.2f\n", name, n, iv, len(xs), med, mx)
	}
	client := srv.Client(func(o *redis.Options) { o.PoolSize = 64 })
	trial := 0
	newGroup := func(iv time.Duration) *benchGroup {
		trial++
		return &benchGroup{opts: partition.Options{Name: fmt.Sprintf("bench-%d", trial), Interval: iv}, c: client}
	}
	inIntervals := func(d, iv time.Duration) float64 {
		if d < 0 {
			return -1
		}
		return d.Seconds() / iv.Seconds()
	}
	for _, n := range []int{12, 100} {
		iv := 300 * time.Millisecond
		var start, join, leave, fixedJoin, fixedLeave, idleJoin, idleLeave []float64
		var calls, regs, retries, misses []float64
		for range 7 {
			// Changes at a random phase of the interval: the time to a
			// lease depends on it.
			time.Sleep(time.Duration(rand.Int64N(int64(iv))))
			g := newGroup(iv)
			g.add(n)
			took, _ := g.untilSettled(time.Millisecond, 10*iv, 0)
			start = append(start, inIntervals(took, iv))
			c, r, t, m := g.settledCalls(iv, 10)
			calls, regs, retries, misses = append(calls, c), append(regs, r), append(retries, t), append(misses, m)
			time.Sleep(time.Duration(rand.Int64N(int64(iv))))
			g.add(1)
			took, idle := g.untilSettled(time.Millisecond, 10*iv, n)
			join = append(join, inIntervals(took, iv))
			idleJoin = append(idleJoin, idle.Seconds()/iv.Seconds()/float64(n))
			time.Sleep(3*iv + time.Duration(rand.Int64N(int64(iv))))
			g.remove(1)
			took, idle = g.untilSettled(time.Millisecond, 10*iv, n)
			leave = append(leave, inIntervals(took, iv))
			idleLeave = append(idleLeave, idle.Seconds()/iv.Seconds()/float64(n))
			// Changes at one fixed phase: just after the settled group's
			// renewals (0.3 of the interval, past their burst).
			time.Sleep(3 * iv)
			serverPhase(client, iv, 0.3)
			g.add(1)
			took, _ = g.untilSettled(time.Millisecond, 10*iv, n)
			fixedJoin = append(fixedJoin, inIntervals(took, iv))
			time.Sleep(3 * iv)
			serverPhase(client, iv, 0.3)
			g.remove(1)
			took, _ = g.untilSettled(time.Millisecond, 10*iv, n)
			fixedLeave = append(fixedLeave, inIntervals(took, iv))
			g.stop()
		}
		row("start to fully assigned (intervals)", n, iv, start)
		row("join to fully assigned, random phase (intervals)", n, iv, join)
		row("join to fully assigned, fixed phase (intervals)", n, iv, fixedJoin)
		row("leave to fully assigned, random phase (intervals)", n, iv, leave)
		row("leave to fully assigned, fixed phase (intervals)", n, iv, fixedLeave)
		row("stand-down per holder, join (intervals)", n, iv, idleJoin)
		row("stand-down per holder, leave (intervals)", n, iv, idleLeave)
		row("script calls per worker per interval, settled", n, iv, calls)
		row("  of which registrations", n, iv, regs)
		row("  retries (no answer in time)", n, iv, retries)
		row("  misses (outside the window)", n, iv, misses)
	}
	if os.Getenv("NANDI_BENCH_BIG") != "0" {
		iv := 2 * time.Second
		g := newGroup(iv)
		g.add(1000)
		took, _ := g.untilSettled(5*time.Millisecond, 10*iv, 0)
		row("start to fully assigned (intervals)", 1000, iv, []float64{inIntervals(took, iv)})
		held := make([]partition.Assignment, len(g.ws))
		for i, w := range g.ws {
			held[i], _ = w.l.Current()
		}
		cpu := func() float64 {
			u, _ := strconv.ParseFloat(srv.InfoSection("cpu", "used_cpu_user"), 64)
			y, _ := strconv.ParseFloat(srv.InfoSection("cpu", "used_cpu_sys"), 64)
			return u + y
		}
		cpu0 := cpu()
		changes, gaps, samples := 0, 0, 0
		end := time.Now().Add(100 * iv)
		for time.Now().Before(end) {
			time.Sleep(20 * time.Millisecond)
			for i, w := range g.ws {
				a, ok := w.l.Current()
				samples++
				if !ok {
					gaps++
				} else if a.Index != held[i].Index || a.Replicas != held[i].Replicas {
					changes++
					held[i] = a
				}
			}
		}
		cpuPer := (cpu() - cpu0) / 100
		row("index changes in 100 intervals (settled)", 1000, iv, []float64{float64(changes)})
		fmt.Fprintf(tw, "samples of a worker holding nothing\t1000\t%v\t1\t%d of %d\t\n", iv, gaps, samples)
		fmt.Fprintf(tw, "Redis CPU per interval, 1000 workers\t1000\t%v\t1\t%.1fms\t\n", iv, cpuPer*1000)
		g.stop()
	}
	for range b.N {
	}
}
