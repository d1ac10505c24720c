package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/redis/go-redis/v9"
)

// The autoscaling benchmark's settings: the deployed ones
// (keda/scaledobject.yaml, deployment.yaml) at a tenth of their times:
// lease intervals of 500ms, KEDA polling every 500ms, the HPA holding a
// size for 6 s, KEDA cooling down for 12 s before zero. A burst arrives at
// 4,000 tasks/s for 12.5 s; a worker does at most 800/s (Concurrency 8,
// handlers of 10ms), so the group needs about 5 while it arrives.
const (
	asShards       = 8
	asBurst        = 50_000
	asRate         = 4000 // tasks/s while a burst arrives
	asBursts       = 3
	asMaxReplicas  = 8
	asConcurrency  = 8
	asHandle       = 10 * time.Millisecond
	asTarget       = 800 // entries per worker: a second of its work
	asPoll         = 500 * time.Millisecond
	asStabilize    = 6 * time.Second
	asCooldown     = 12 * time.Second
	asFallbackFail = 3
	asIdle         = 2 * time.Second
)

// autoscaleRun is one run's figures.
type autoscaleRun struct {
	largestLag           int64
	drains               []time.Duration
	workerSeconds, fixed float64
	steps                []float64       // flow after / before each step taken with a backlog
	pauses               []time.Duration // per step: the longest with nothing finished after it
	lost, twice, redone  int64
	peak                 int
	firsts               []time.Duration // from a burst's first entry to its first worker
}

// BenchmarkAutoscaleFigures drives a group through three bursts of 50,000
// tasks from zero workers to the most KEDA's rule asks and back to zero,
// with real workers (consumers under leases, in this process) on a real
// redis-server, nandi scaler's reading as the metric, and a controller
// that applies KEDA's rule (desired = ceil(backlog / target), active above
// zero, its fallback for a group never run, the HPA's scale-down
// stabilization, the cooldown before zero). Fence on and off in one run.
//
//	go test -run '^$' -bench AutoscaleFigures -benchtime 1x ./cmd/nandi/
func BenchmarkAutoscaleFigures(b *testing.B) {
	srv := redistest.Start(b)
	runs := map[string]autoscaleRun{}
	for _, mode := range []string{"fenced handoff", "fence off"} {
		runs[mode] = autoscale(b, srv.Client(), "as-"+strconv.Itoa(len(runs)), mode == "fence off")
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	defer fmt.Printf("(arriving at %d/s; a worker does at most %d/s; KEDA's rule at a tenth of the deployed times; flow and pauses over the 4 intervals after a step taken with a backlog, the flow against the 4 before)\n",
		asRate, int(asConcurrency*time.Second/asHandle))
	defer tw.Flush()
	fmt.Fprintf(tw, "autoscaling, %s, %d bursts of %d tasks\tlargest lag\tfirst worker after (s)\tdrained after (s)\tworker-seconds (vs %d fixed)\tflow through a step, median (min)\tlongest pause after a step, median (max)\tsteps\tlost\tdone twice\tredone, announced\n",
		time.Now().UTC().Format("2006-01-02"), asBursts, asBurst, asMaxReplicas)
	for _, mode := range []string{"fenced handoff", "fence off"} {
		r := runs[mode]
		var drains, firsts []string
		for _, d := range r.drains {
			drains = append(drains, fmt.Sprintf("%.1f", d.Seconds()))
		}
		for _, d := range r.firsts {
			firsts = append(firsts, fmt.Sprintf("%.1f", d.Seconds()))
		}
		med, low := math.NaN(), math.NaN()
		if len(r.steps) > 0 {
			s := slices.Clone(r.steps)
			slices.Sort(s)
			med, low = s[len(s)/2], s[0]
		}
		pmed, pmax := time.Duration(0), time.Duration(0)
		if len(r.pauses) > 0 {
			p := slices.Clone(r.pauses)
			slices.Sort(p)
			pmed, pmax = p[len(p)/2], p[len(p)-1]
		}
		fmt.Fprintf(tw, "%s (up to %d workers)\t%d\t%v\t%v\t%.0f of %.0f (%.2f)\t%.2f (%.2f)\t%v (%v)\t%d\t%d\t%d\t%d\n", mode, r.peak, r.largestLag, firsts, drains,
			r.workerSeconds, r.fixed, r.workerSeconds/r.fixed, med, low, pmed, pmax, len(r.pauses), r.lost, r.twice, r.redone)
	}
}

// asWorker is one running worker.
type asWorker struct {
	cs     *consumer.Consumer
	cancel context.CancelFunc
	done   chan struct{}
}

func autoscale(b *testing.B, c *redis.Client, group string, unfenced bool) autoscaleRun {
	ctx := context.Background()
	names := make([]string, asShards)
	for i := range names {
		names[i] = group + "." + strconv.Itoa(i)
	}
	src, err := redisstream.NewSharded(c, names, redisstream.Options{})
	if err != nil {
		b.Fatal(err)
	}
	var (
		mu      sync.Mutex
		done    = map[string]int{}
		handled atomic.Int64
		fleet   []*asWorker
		redone  int64
	)
	handler := func(ctx context.Context, m *transport.Message) error {
		select {
		case <-time.After(asHandle):
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		done[m.Key]++
		mu.Unlock()
		handled.Add(1)
		return nil
	}
	start := func() {
		l, err := partition.New(c, partition.Options{Name: group, Interval: 500 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		cs, err := consumer.New(l, src, handler, consumer.Options{Concurrency: asConcurrency, CheckpointInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), NoFencedHandoff: unfenced})
		if err != nil {
			b.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		w := &asWorker{cs: cs, cancel: cancel, done: make(chan struct{})}
		go func() { defer close(w.done); _ = cs.Run(wctx) }()
		fleet = append(fleet, w)
	}
	stop := func() { // the newest, as a Deployment scales down
		w := fleet[len(fleet)-1]
		fleet = fleet[:len(fleet)-1]
		w.cancel()
		<-w.done
		redone += w.cs.Stats().Redone
	}
	s := &scaler{lease: c, logs: &logs{redis: c}, every: 0, log: slog.New(slog.DiscardHandler), readings: map[string]*reading{}}

	// Flow: tasks finished per 100ms.
	var flowMu sync.Mutex
	var flow []int64
	sampling := make(chan struct{})
	var workerSeconds float64
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		last := int64(0)
		for {
			select {
			case <-sampling:
				return
			case <-tick.C:
			}
			n := handled.Load()
			flowMu.Lock()
			flow = append(flow, n-last)
			flowMu.Unlock()
			last = n
		}
	}()
	began := time.Now()
	var run autoscaleRun
	var recs []struct {
		at   time.Time
		want int
	}
	var stepsAt []int // flow samples at which the fleet changed with a backlog
	failures := 0
	zeroSince := time.Time{}
	// poll applies KEDA's rule once and returns the backlog read.
	poll := func() int64 {
		bl, err := s.backlog(ctx, group)
		want := 0
		var lag int64 = -1
		switch {
		case err != nil:
			failures++
			if failures >= asFallbackFail {
				want = 1 // fallback.replicas
			}
		default:
			failures = 0
			lag = bl.Entries
			run.largestLag = max(run.largestLag, lag)
			want = min(int(math.Ceil(float64(lag)/asTarget)), asMaxReplicas)
		}
		now := time.Now()
		recs = append(recs, struct {
			at   time.Time
			want int
		}{now, want})
		// The HPA takes the largest recommendation of the window to scale
		// down; up at once.
		target := want
		for _, r := range recs {
			if now.Sub(r.at) <= asStabilize {
				target = max(target, r.want)
			}
		}
		// KEDA keeps one while active, and goes to zero after the cooldown.
		if lag == 0 {
			if zeroSince.IsZero() {
				zeroSince = now
			}
			if now.Sub(zeroSince) < asCooldown && len(fleet) > 0 {
				target = max(target, 1)
			}
		} else {
			zeroSince = time.Time{}
		}
		if target != len(fleet) && lag > 0 && len(fleet) > 0 && target > 0 {
			flowMu.Lock()
			stepsAt = append(stepsAt, len(flow))
			flowMu.Unlock()
		}
		for len(fleet) < target {
			start()
		}
		for len(fleet) > target {
			stop()
		}
		run.peak = max(run.peak, len(fleet))
		return lag
	}
	tick := func() {
		t0 := time.Now()
		workers := len(fleet)
		time.Sleep(asPoll)
		workerSeconds += float64(workers) * time.Since(t0).Seconds()
	}
	var keys []string
	for burst := range asBursts {
		t0 := time.Now()
		burstKeys := make([]string, asBurst)
		for i := range burstKeys {
			burstKeys[i] = fmt.Sprintf("b%d-%d", burst, i)
		}
		keys = append(keys, burstKeys...)
		written := make(chan struct{})
		go func() { // asRate a second, a pipeline of 200 every 50ms
			defer close(written)
			for i := 0; i < asBurst; i += 200 {
				pipe := c.Pipeline()
				for _, k := range burstKeys[i:min(i+200, asBurst)] {
					pipe.XAdd(ctx, &redis.XAddArgs{Stream: src.StreamFor(k), Values: []any{"id", k, "payload", "x"}})
				}
				if _, err := pipe.Exec(ctx); err != nil {
					b.Error(err)
					return
				}
				time.Sleep(time.Until(t0.Add(time.Duration(i+200) * time.Second / asRate)))
			}
		}()
		first := time.Duration(0)
		// Until this burst is drained, then until the fleet is back to zero.
		drained := false
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); tick() {
			lag := poll()
			if first == 0 && len(fleet) > 0 {
				first = time.Since(t0)
				run.firsts = append(run.firsts, first)
			}
			select {
			case <-written:
			default:
				continue // still arriving
			}
			if !drained && lag == 0 {
				run.drains = append(run.drains, time.Since(t0))
				drained = true
			}
			if drained && len(fleet) == 0 {
				break
			}
		}
		if !drained || len(fleet) > 0 {
			b.Fatalf("burst %d: not drained and back to zero in 3 minutes (%d workers)", burst, len(fleet))
		}
		time.Sleep(asIdle)
	}
	close(sampling)
	flowMu.Lock()
	for _, at := range stepsAt {
		ratio, pause := flowAround(flow, at)
		if !math.IsNaN(ratio) {
			run.steps = append(run.steps, ratio)
		}
		run.pauses = append(run.pauses, pause)
	}
	flowMu.Unlock()
	total := time.Since(began).Seconds()
	run.workerSeconds, run.fixed = workerSeconds, asMaxReplicas*total
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		switch n := done[k]; {
		case n == 0:
			run.lost++
		case n > 1:
			run.twice++
		}
	}
	run.redone = redone
	return run
}

// flowAround is the flow in the 4 intervals (2 s) after sample at over
// the 4 before it (NaN when nothing finished before), and the longest run
// of samples with nothing finished after it.
func flowAround(flow []int64, at int) (ratio float64, pause time.Duration) {
	const window = 20 // samples of 100ms
	var before, after int64
	var run time.Duration
	for i := max(at-window, 0); i < at; i++ {
		before += flow[i]
	}
	for i := at; i < min(at+window, len(flow)); i++ {
		after += flow[i]
		if flow[i] == 0 {
			run += 100 * time.Millisecond
			pause = max(pause, run)
		} else {
			run = 0
		}
	}
	if before == 0 {
		return math.NaN(), pause
	}
	return float64(after) / float64(before), pause
}
