package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
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

func evalCalls(srv *redistest.Server) int64 {
	var n int64
	for _, cmd := range []string{"cmdstat_evalsha", "cmdstat_eval"} {
		v := srv.InfoSection("commandstats", cmd)
		if i := strings.Index(v, "calls="); i >= 0 {
			s := v[i+6:]
			if j := strings.IndexByte(s, ','); j >= 0 {
				s = s[:j]
			}
			c, _ := strconv.ParseInt(s, 10, 64)
			n += c
		}
	}
	return n
}

func stats(xs []float64) (median, maxv float64) {
	slices.Sort(xs)
	return xs[len(xs)/2], xs[len(xs)-1]
}

// BenchmarkLeaseFigures prints the lease's figures on a real redis-server:
//
//	go test -run '^$' -bench LeaseFigures -benchtime 1x ./integration/
//
// (make bench). Set NANDI_BENCH_BIG=0 to leave out the 1,000-worker run.
func BenchmarkLeaseFigures(b *testing.B) {
	srv := redistest.Start(b)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "figure\tworkers\tinterval\ttrials\tmedian\tmax")
	row := func(name string, n int, iv time.Duration, xs []float64, unit string) {
		med, mx := stats(xs)
		fmt.Fprintf(tw, "%s\t%d\t%v\t%d\t%.2f %s\t%.2f %s\n", name, n, iv, len(xs), med, unit, mx, unit)
	}
	client := srv.Client(func(o *redis.Options) { o.PoolSize = 64 })
	trial := 0
	newGroup := func(iv time.Duration) *benchGroup {
		trial++
		return &benchGroup{opts: partition.Options{Name: fmt.Sprintf("bench-%d", trial), Interval: iv}, c: client}
	}
	for _, n := range []int{12, 100} {
		iv := 300 * time.Millisecond
		var start, join, leave, idleJoin, idleLeave, rtts []float64
		for range 7 {
			// Start at a random phase of the interval: time to a lease
			// depends on it.
			time.Sleep(time.Duration(rand.Int64N(int64(iv))))
			g := newGroup(iv)
			calls0 := evalCalls(srv)
			t0 := time.Now()
			g.add(n)
			took, _ := g.untilSettled(time.Millisecond, 10*iv, 0)
			start = append(start, took.Seconds()/iv.Seconds())
			time.Sleep(3*iv + time.Duration(rand.Int64N(int64(iv))))
			g.add(1)
			took, idle := g.untilSettled(time.Millisecond, 10*iv, n)
			join = append(join, took.Seconds()/iv.Seconds())
			idleJoin = append(idleJoin, idle.Seconds()/iv.Seconds()/float64(n))
			time.Sleep(3*iv + time.Duration(rand.Int64N(int64(iv))))
			g.remove(1)
			took, idle = g.untilSettled(time.Millisecond, 10*iv, n)
			leave = append(leave, took.Seconds()/iv.Seconds())
			idleLeave = append(idleLeave, idle.Seconds()/iv.Seconds()/float64(n))
			elapsed := time.Since(t0).Seconds() / iv.Seconds()
			rtts = append(rtts, float64(evalCalls(srv)-calls0)/float64(n)/elapsed)
			g.stop()
		}
		row("start to fully assigned (intervals)", n, iv, start, "")
		row("join to fully assigned (intervals)", n, iv, join, "")
		row("leave to fully assigned (intervals)", n, iv, leave, "")
		row("stand-down per holder, join (intervals)", n, iv, idleJoin, "")
		row("stand-down per holder, leave (intervals)", n, iv, idleLeave, "")
		row("round trips per worker per interval", n, iv, rtts, "")
	}
	if os.Getenv("NANDI_BENCH_BIG") != "0" {
		iv := 2 * time.Second
		g := newGroup(iv)
		g.add(1000)
		took, _ := g.untilSettled(5*time.Millisecond, 10*iv, 0)
		row("start to fully assigned (intervals)", 1000, iv, []float64{took.Seconds() / iv.Seconds()}, "")
		held := make([]partition.Assignment, len(g.ws))
		for i, w := range g.ws {
			held[i], _ = w.l.Current()
		}
		var mu sync.Mutex
		changes, gaps := 0, 0
		end := time.Now().Add(100 * iv)
		for time.Now().Before(end) {
			time.Sleep(20 * time.Millisecond)
			for i, w := range g.ws {
				a, ok := w.l.Current()
				mu.Lock()
				if !ok {
					gaps++
				} else if a.Index != held[i].Index || a.Replicas != held[i].Replicas {
					changes++
					held[i] = a
				}
				mu.Unlock()
			}
		}
		row("reshuffles in 100 intervals (settled)", 1000, iv, []float64{float64(changes)}, "")
		row("samples with a worker holding nothing", 1000, iv, []float64{float64(gaps)}, "")
		g.stop()
	}
	for range b.N {
	}
}
