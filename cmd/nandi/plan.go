package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/nandi-go/nandi/partition"
)

// Plan is what a group's settings cost and whether the network fits.
type Plan struct {
	Interval       time.Duration    `json:"interval_ns"`
	Gap            time.Duration    `json:"gap_ns"` // Gap as a duration
	Workers        int              `json:"worker_count"`
	RTT            time.Duration    `json:"rtt_ns"`
	Jitter         time.Duration    `json:"jitter_ns"`
	FirstLease     [2]time.Duration `json:"first_lease_ns"`   // a new worker's first lease, from..to
	RestartLease   [2]time.Duration `json:"restart_lease_ns"` // the first lease of a worker started as its group's others stopped
	Pause          time.Duration    `json:"pause_ns"`         // each share, per change of membership: the drain and the handover
	Assigned       [2]time.Duration `json:"assigned_ns"`      // every index held again after a change
	CrashUnowned   time.Duration    `json:"crash_unowned_ns"` // a crashed worker's share
	Spacing        time.Duration    `json:"spacing_ns"`       // between neighbouring registrations
	CallsPerSecond float64          `json:"calls_per_second"` // on the group's Redis node
	// KEDATarget is the targetValue of a ScaledObject's metrics-api trigger
	// on nandi scaler (docs/autoscaling.md): the entries one worker drains
	// in Drain (-worker-rate x -drain); 0 without -worker-rate.
	KEDATarget int64         `json:"keda_target,omitempty"`
	Drain      time.Duration `json:"drain_ns,omitempty"`
	Verdict    string        `json:"verdict"` // OK, WARN or FAIL
	Findings   []string      `json:"findings"`
}

// plan computes a Plan; the figures are the ones docs/figures.md gives, measured
// by the integration tests.
func plan(iv time.Duration, gap float64, workers int, rtt, jitter time.Duration) Plan {
	g := partition.Margin(iv, gap)
	p := Plan{Interval: iv, Gap: g, Workers: workers, RTT: rtt, Jitter: jitter,
		FirstLease: [2]time.Duration{2 * iv, 3 * iv}, Pause: 7 * g / 2,
		// the stopped workers' registrations count for the windows that
		// follow (TestARestartedGroupHoldsWithinFourIntervals: 3.03-3.93)
		RestartLease:   [2]time.Duration{3 * iv, 4 * iv},
		Assigned:       [2]time.Duration{iv * 20 / 10, iv * 28 / 10},
		CrashUnowned:   2 * iv,
		Spacing:        min(time.Duration(float64(iv)*(1-2.5*gap)/float64(max(workers, 1))), time.Millisecond),
		CallsPerSecond: float64(workers) / iv.Seconds(),
		Verdict:        "OK"}
	worse := func(v, why string) {
		p.Findings = append(p.Findings, v+": "+why)
		if v == "FAIL" || p.Verdict == "OK" {
			p.Verdict = v
		}
	}
	p.Findings = []string{}
	late := rtt + jitter
	switch {
	case late >= g:
		worse("FAIL", fmt.Sprintf("round trip + jitter (%v) is not inside the gap (%v): every renewal comes after its deadline and the group stands down every interval; widen the gap or lengthen the interval to at least %v", late, g, time.Duration(float64(4*late)/gap)))
	case late > g/4:
		worse("WARN", fmt.Sprintf("round trip + jitter (%v) uses more than a quarter of the gap (%v): a GC pause or a slow moment on top of it makes a worker stand down; aim for a gap of at least 4x (%v)", late, g, 4*late))
	}
	// Where a registration lands decides nothing but when its lease is
	// renewed (the script keeps each worker's index), so jitter matters
	// only against the gap, above.
	if p.Spacing <= 0 {
		worse("FAIL", "no room between registrations")
	}
	if p.CallsPerSecond > 20000 {
		worse("WARN", fmt.Sprintf("%.0f script calls a second on one Redis node (the group's keys share a slot): lengthen the interval or split the fleet into groups", p.CallsPerSecond))
	}
	return p
}

func printPlan(w io.Writer, p Plan) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "settings\tinterval %v, gap %v, %s\n", p.Interval, p.Gap, plural(p.Workers, "worker"))
	fmt.Fprintf(tw, "network\tround trip %v, jitter %v\n", p.RTT, p.Jitter)
	fmt.Fprintf(tw, "first lease of a new worker\t%v to %v\n", p.FirstLease[0], p.FirstLease[1])
	fmt.Fprintf(tw, "first lease of a group restarted at once\t%v to %v (its stopped workers still count for the windows that follow)\n", p.RestartLease[0], p.RestartLease[1])
	fmt.Fprintf(tw, "pause per change of membership\ton a log, the drain of the tasks in flight (the fenced handoff, from a group's second change on); otherwise about %v per share (the drain, and a gap and a half to the new holders' first registrations)\n", p.Pause)
	fmt.Fprintf(tw, "every index held again after a change\ton a log within about %v (fenced); otherwise %v to %v\n", p.Interval+p.Gap, p.Assigned[0], p.Assigned[1])
	fmt.Fprintf(tw, "a crashed worker's share unowned\tabout %v\n", p.CrashUnowned)
	fmt.Fprintf(tw, "spacing of registrations\t%v\n", p.Spacing)
	fmt.Fprintf(tw, "script calls on the group's Redis node\t%.1f/s\n", p.CallsPerSecond)
	if p.KEDATarget > 0 {
		fmt.Fprintf(tw, "KEDA targetValue (nandi scaler)\t%d entries per worker: a backlog drains in about %v at the workers KEDA runs for it\n", p.KEDATarget, p.Drain)
		fmt.Fprintf(tw, "from zero workers, the first task\tKEDA's pollingInterval, the pod's start, then the first lease (%v to %v)\n", p.FirstLease[0], p.FirstLease[1])
	}
	tw.Flush()
	fmt.Fprintf(w, "\nverdict: %s\n", p.Verdict)
	for _, f := range p.Findings {
		fmt.Fprintln(w, "  "+f)
	}
}

// ShardRow is what a group of Workers costs on an aligned log: each entry
// is read by Amplification workers, and each worker reads PerWorker
// shards, those s with s % Step == index % Step.
type ShardRow struct {
	Workers, Amplification, PerWorker, Step int
}

// shardCandidates are shard counts with many divisors, which make the
// common group sizes read each entry once; beyond 120 every worker reads
// many streams (or partitions, or subjects) for little gain.
var shardCandidates = []int{12, 24, 36, 48, 60, 120}

// shardPlan is the read amplification of an aligned log of n shards for
// groups of 1..workers, and the shard count of shardCandidates (or n) with
// the lowest mean amplification over them (the smaller on a tie).
func shardPlan(n, workers int) (rows []ShardRow, suggest int, mean float64) {
	for r := 1; r <= workers; r++ {
		a := partition.ReadAmplification(n, r)
		rows = append(rows, ShardRow{Workers: r, Amplification: a, PerWorker: n / gcdInt(n, r), Step: gcdInt(n, r)})
	}
	meanOf := func(n int) float64 {
		sum := 0
		for r := 1; r <= workers; r++ {
			sum += partition.ReadAmplification(n, r)
		}
		return float64(sum) / float64(workers)
	}
	suggest, mean = n, meanOf(n)
	for _, c := range shardCandidates {
		if m := meanOf(c); m < mean || (m == mean && c < suggest) {
			suggest, mean = c, m
		}
	}
	return rows, suggest, mean
}

func gcdInt(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func printShardPlan(w io.Writer, n, workers int) {
	rows, suggest, mean := shardPlan(n, workers)
	fmt.Fprintf(w, "\naligned log of %d shards (each worker reads the shards s with s %% STEP == index %% STEP):\n", n)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKERS\tREAD AMPLIFICATION\tSHARDS PER WORKER\tSTEP")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%dx\t%d of %d\t%d\n", r.Workers, r.Amplification, r.PerWorker, n, r.Step)
	}
	tw.Flush()
	fmt.Fprintf(w, "mean read amplification over 1..%d workers: %.2fx", workers, meanOfRows(rows))
	if suggest != n {
		fmt.Fprintf(w, "; with %d shards: %.2fx (suggested)", suggest, mean)
	}
	fmt.Fprintln(w)
}

func meanOfRows(rows []ShardRow) float64 {
	sum := 0
	for _, r := range rows {
		sum += r.Amplification
	}
	return float64(sum) / float64(max(len(rows), 1))
}

func cmdPlan(ctx context.Context, args []string, out, errOut io.Writer) int {
	fs := newFlags("plan", out, errOut)
	iv := fs.Duration("interval", partition.DefaultInterval, "partition.Options.Interval")
	gap := fs.Float64("gap", partition.DefaultGap, "partition.Options.Gap")
	workers := fs.Int("workers", 10, "workers in the group")
	rtt := fs.Duration("rtt", time.Millisecond, "round trip to the group's Redis (measured with -redis)")
	jitter := fs.Duration("jitter", 0, "how much later than usual a round trip can be (p99 - p50; measured with -redis)")
	url := fs.String("redis", "", "measure rtt and jitter against this Redis (100 PINGs) instead of taking them from the flags (not taken from the environment)")
	rate := fs.Float64("worker-rate", 0, "tasks a second one worker handles (rate(nandi_consumer_messages_total{outcome=\"handled\"}) per pod): print KEDA's targetValue")
	drain := fs.Duration("drain", 30*time.Second, "with -worker-rate: how long a backlog may take to drain")
	shards := fs.Int("shards", 0, "an aligned log of this many shards: print the read amplification of groups of 1..-workers, and suggest a shard count")
	if code, ok := fs.parse(args); !ok {
		return code
	}
	if err := (partition.Options{Name: "plan", Interval: *iv, Gap: *gap}).Validate(); err != nil {
		return fs.usageError("%v", err) // settings no lease accepts: a bad value, not a plan that fails
	}
	if *workers < 1 {
		return fs.usageError("-workers must be at least 1")
	}
	if *shards < 0 || *shards > 65536 {
		return fs.usageError("-shards must be from 1 to 65536 (0: no shard plan)")
	}
	if *rate < 0 || *drain <= 0 {
		return fs.usageError("-worker-rate must not be negative and -drain must be positive")
	}
	if *rtt < 0 || *jitter < 0 {
		return fs.usageError("-rtt and -jitter must not be negative")
	}
	if *url != "" {
		c, code := fs.connected(ctx, *url)
		if c == nil {
			return code
		}
		defer c.Close()
		var rtts []time.Duration
		for range 100 {
			start := time.Now()
			if err := c.Ping(ctx).Err(); err != nil {
				return fs.failed(fmt.Errorf("measuring the round trip: %w", err))
			}
			rtts = append(rtts, time.Since(start))
		}
		slices.Sort(rtts)
		*rtt, *jitter = rtts[50], rtts[98]-rtts[50]
	}
	p := plan(*iv, *gap, *workers, *rtt, *jitter)
	if *rate > 0 {
		p.KEDATarget, p.Drain = max(int64(*rate*(*drain).Seconds()), 1), *drain
	}
	printPlan(out, p)
	if *shards > 0 {
		printShardPlan(out, *shards, *workers)
	}
	if p.Verdict == "FAIL" {
		return exitFailed
	}
	return exitOK
}
