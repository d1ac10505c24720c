package delivery

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/faultproxy"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/redis/go-redis/v9"
)

// rebalanceChanges are the changes measured: a join, a clean leave (the
// leaver drains at once), a clean leave with consumer.Options.ServeToCap
// (the leaver serves its share to its lease's cap first), and a worker
// stopped (its link to Redis held, as SIGSTOP or a partition would: it
// neither renews, nor says it is ready, nor releases; what it still
// completes from its buffer counts).
var rebalanceChanges = []string{"join 4 -> 5", "clean leave 5 -> 4", "clean leave 5 -> 4, ServeToCap", "stopped 5 -> 4"}

// rebalanceRun is one busy group going through one change of membership.
type rebalanceRun struct {
	mu   sync.Mutex
	done []completion // every task completed, in order
}

type completion struct {
	at     time.Time
	worker int
}

// BenchmarkRebalanceFigures: what a change of membership costs a busy
// group (issue 35). A group on 24 aligned Redis streams with a deep
// backlog, handlers of 2ms, Concurrency 4, an interval of 500ms; a worker
// joins (4 -> 5) or one leaves cleanly (5 -> 4: its context is cancelled,
// it drains at once, or with consumer.Options.ServeToCap serves its share to
// its lease's cap first). "flow kept" is what the group completed in the 4 intervals
// after the change, over what the workers that stay completed in the 4
// intervals before it (a perfect handover keeps about 1.0 or more); "longest
// pause" is the longest window in those 4 intervals with nothing completed,
// in intervals. Each change 3 times under each rule, alternating, in one
// run; medians: the fenced handoff (now: each worker drains, releases its
// share in the ledger and takes its new one an interval before the lease's
// timing would), leases kept to their cap through the change (the rule
// before the fence), and ended at the registration that disagrees (the
// rule before that). The group goes through one change before the one
// measured: a new group's first epoch does not know who serves it, so its
// first change is handed over by the lease's timing (docs/PROTOCOL.md).
//
//	go test -run '^$' -bench RebalanceFigures -benchtime 1x ./integration/delivery/
func BenchmarkRebalanceFigures(b *testing.B) {
	const (
		iv     = 500 * time.Millisecond
		shards = 24
		trials = 3
	)
	srv := redistest.Start(b)
	names := redisstream.Names("rebalance", shards)
	fillAligned(srv.Client(), names, 400_000)
	type key struct {
		change string
		rule   int
	}
	rules := []string{"standing down at once (before the keep)", "leases kept to their cap (before the fence)", "fenced handoff (now)"}
	flow, pause := map[key][]float64{}, map[key][]float64{}
	for trial := range trials {
		for _, change := range rebalanceChanges {
			for rule := range rules {
				f, p := rebalanceOnce(b, srv, names, iv, change, fmt.Sprintf("rb-%d-%d-%d", trial, rule, len(change)), rule == 0, rule < 2)
				k := key{change, rule}
				flow[k], pause[k] = append(flow[k], f), append(pause[k], p)
			}
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "rebalance, %s, 24 aligned streams, 2ms handlers, Concurrency 4, interval %v\tflow kept\tlongest pause (intervals)\n", time.Now().UTC().Format("2006-01-02"), iv)
	for _, change := range rebalanceChanges {
		for rule, how := range rules {
			k := key{change, rule}
			fmt.Fprintf(tw, "%s, %s\t%.2f (%.2f-%.2f)\t%.2f (%.2f-%.2f)\n", change, how,
				median(flow[k]), slices.Min(flow[k]), slices.Max(flow[k]), median(pause[k]), slices.Min(pause[k]), slices.Max(pause[k]))
		}
	}
	for range b.N {
	}
}

// rebalanceOnce runs a fresh group through change and returns the flow
// kept and the longest pause, in intervals.
func rebalanceOnce(b *testing.B, srv *redistest.Server, names []string, iv time.Duration, change, group string, standDown, unfenced bool) (flow, pause float64) {
	run := &rebalanceRun{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var leases []*partition.Lease
	var stops []context.CancelFunc
	var links []*faultproxy.Proxy
	start := func() {
		id := len(leases)
		link := faultproxy.New(b, srv.Addr())
		links = append(links, link)
		client := redis.NewClient(&redis.Options{Addr: link.Addr(), MaxRetries: -1})
		b.Cleanup(func() { _ = client.Close() })
		l, err := partition.New(client, partition.Options{Name: group, Interval: iv, StandDownAtChange: standDown})
		if err != nil {
			b.Fatal(err)
		}
		src, err := redisstream.NewSharded(client, names, redisstream.Options{})
		if err != nil {
			b.Fatal(err)
		}
		c, err := consumer.New(l, src, func(context.Context, *transport.Message) error {
			time.Sleep(2 * time.Millisecond)
			run.mu.Lock()
			run.done = append(run.done, completion{time.Now(), id})
			run.mu.Unlock()
			return nil
		}, consumer.Options{Concurrency: 4, ServeToCap: strings.HasSuffix(change, "ServeToCap"), ShutdownTimeout: 10 * time.Second, NoFencedHandoff: unfenced})
		if err != nil {
			b.Fatal(err)
		}
		wctx, stop := context.WithCancel(ctx)
		leases, stops = append(leases, l), append(stops, stop)
		wg.Go(func() { _ = c.Run(wctx) })
	}
	// covered: every worker holds an ordinary term of n (a provisional
	// one may not have opened yet).
	covered := func(n int, ls []*partition.Lease) func() bool {
		return func() bool {
			for _, l := range ls {
				t := l.Term()
				if a, ok := l.Current(); !ok || a.Replicas != n || t == nil || t.Provisional() {
					return false
				}
			}
			return true
		}
	}
	from := 4
	if change != "join 4 -> 5" {
		from = 5
	}
	// One worker short first, then the last: the change measured is not
	// the group's first (see above).
	for range from - 1 {
		start()
	}
	redistest.WaitFor(b, 30*time.Second, "the group settled", covered(from-1, leases))
	start()
	redistest.WaitFor(b, 30*time.Second, "the group settled", covered(from, leases))
	time.Sleep(4 * iv) // steady: the 4 intervals measured before the change
	t0 := time.Now()
	stay := map[int]bool{}
	for i := range from {
		stay[i] = true
	}
	switch {
	case from == 4:
		start()
	case strings.HasPrefix(change, "stopped"):
		delete(stay, 4)
		links[4].Hold()
	default:
		delete(stay, 4)
		stops[4]()
	}
	time.Sleep(4*iv + iv/10)
	if strings.HasPrefix(change, "stopped") {
		links[4].Release() // so that its Run returns at once
	}
	cancel()
	wg.Wait()

	run.mu.Lock()
	defer run.mu.Unlock()
	var steady, after int
	last := t0
	longest := time.Duration(0)
	for _, c := range run.done {
		switch {
		case c.at.Before(t0) && !c.at.Before(t0.Add(-4*iv)) && stay[c.worker]:
			steady++
		case !c.at.Before(t0) && c.at.Before(t0.Add(4*iv)):
			after++
			longest = max(longest, c.at.Sub(last))
			last = c.at
		}
	}
	longest = max(longest, t0.Add(4*iv).Sub(last))
	if steady == 0 {
		b.Fatalf("%s: nothing completed in the 4 intervals before the change", change)
	}
	return float64(after) / float64(steady), float64(longest) / float64(iv)
}
