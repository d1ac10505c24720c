package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func nandi(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// status, status -json and watch against a real redis-server with a
// running group of three consumers over a two-shard log.
func TestStatusAndWatchOfARunningGroup(t *testing.T) {
	s := redistest.Start(t)
	const iv = 200 * time.Millisecond
	log := memory.NewLog(2)
	for i := range 100 {
		log.Append(strconv.Itoa(i), nil)
	}
	ctx := context.Background()
	g := newTestGroup(t, s.Client(), "mail", iv, log, func(context.Context, *transport.Message) error { return nil },
		consumer.Options{CheckpointInterval: 20 * time.Millisecond})
	for i := range 3 {
		g.start(fmt.Sprintf("w%d", i+1))
	}
	redistest.WaitFor(t, 10*time.Second, "the group of 3 to hold", func() bool { return g.holding(3) })
	time.Sleep(2 * iv) // checkpoints written
	url := "redis://" + s.Addr()

	code, out, errOut := nandi(t, ctx, "status", "-redis", url, "-group", "mail", "-json")
	if code != 0 {
		t.Fatalf("status -json: exit %d: %s", code, errOut)
	}
	var st Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status -json: %v\n%s", err, out)
	}
	assertSnakeCase(t, "status -json", out)
	if st.Interval != iv || st.Gap != partition.DefaultGap || st.Generation == "" {
		t.Errorf("settings %v %v generation %q; want %v, %v and a generation", st.Interval, st.Gap, st.Generation, iv, partition.DefaultGap)
	}
	closed := 0
	for _, c := range st.Counts {
		if c.Closed {
			closed++
			if c.Count != 3 {
				t.Errorf("closed interval %d counted %d; want 3 (the group)", c.Interval, c.Count)
			}
		}
	}
	if closed == 0 {
		t.Errorf("no closed interval in %+v", st.Counts)
	}
	var cur *EpochStatus
	for i := range st.Epochs {
		if st.Epochs[i].Current {
			cur = &st.Epochs[i]
		}
	}
	if cur == nil || cur.Replicas != 3 || len(cur.Positions) != 6 {
		t.Fatalf("current epoch %+v; want 3 replicas and 2 shards x 3 indexes of positions", cur)
	}
	for k, p := range cur.Positions {
		if p == "0" {
			t.Errorf("position %s is still 0 after the log was handled and checkpointed", k)
		}
	}
	if len(st.Workers) != 3 {
		t.Fatalf("status -json: %d workers; want 3: %+v", len(st.Workers), st.Workers)
	}
	for i, w := range st.Workers {
		if !w.Held || w.Index != i || w.Replicas != 3 || !strings.HasPrefix(w.Worker, "w") {
			t.Errorf("worker %d: %+v; want w1..w3 holding indexes 0..2 of 3", i, w)
		}
	}

	code, out, errOut = nandi(t, ctx, "status", "-redis", url, "-group", "mail")
	if code != 0 || !strings.Contains(out, "interval 200ms, gap 0.125") || !strings.Contains(out, "(current)") || !strings.Contains(out, "closed") ||
		!strings.Contains(out, "WORKER") || !strings.Contains(out, "2 of 3") {
		t.Errorf("status: exit %d\n%s%s", code, out, errOut)
	}

	wctx, wcancel := context.WithTimeout(ctx, 5*iv)
	defer wcancel()
	code, out, _ = nandi(t, wctx, "watch", "-redis", url, "-group", "mail")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) < 4 {
		t.Fatalf("watch for 5 intervals: exit %d, %d lines; want a header and a line per interval\n%s", code, len(lines), out)
	}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) < 3 || f[2] != "3" {
			t.Errorf("watch line %q: want a count of 3", l)
		}
	}

	// watch marks the rebalance and who joined.
	wctx2, wcancel2 := context.WithTimeout(ctx, 12*iv)
	defer wcancel2()
	watched := make(chan string, 1)
	go func() { _, out, _ := nandi(t, wctx2, "watch", "-redis", url, "-group", "mail"); watched <- out }()
	time.Sleep(2 * iv)
	g.start("w4")
	out = <-watched
	if !strings.Contains(out, "joined: w4") || !strings.Contains(out, "REBALANCE 3 -> 4, handover to the end of this interval") {
		t.Errorf("watch while w4 joined: want a line with REBALANCE 3 -> 4, handover to the end of this interval, and joined: w4\n%s", out)
	}

	if code, _, errOut := nandi(t, ctx, "status", "-redis", url, "-group", "nosuch"); code != 1 || !strings.Contains(errOut, "no group") {
		t.Errorf("status of a missing group: exit %d, %q; want 1 and a message saying so", code, errOut)
	}
}

func TestPlan(t *testing.T) {
	ctx := context.Background()
	code, out, _ := nandi(t, ctx, "plan", "-interval", "5s", "-gap", "0.125", "-rtt", "2ms", "-workers", "200")
	if code != 0 || !strings.Contains(out, "verdict: OK") || !strings.Contains(out, "1ms") || !strings.Contains(out, "40.0/s") {
		t.Errorf("a comfortable plan: exit %d\n%s", code, out)
	}
	// The pause per change: the drain (a gap) and the handover (a gap and
	// a half, and the slots): 3.5 gaps of 625ms (docs/figures.md measures
	// 0.34-0.47 of an interval at a gap of 0.125).
	if !strings.Contains(out, "about 2.1875s per share") {
		t.Errorf("a plan at 5s and a gap of 0.125: want a pause per change of 2.1875s per share\n%s", out)
	}
	// On a log the fenced handoff: the drain, and the new mapping within
	// the next interval's registrations (docs/figures.md: 0.04-0.12 of an
	// interval's pause).
	if !strings.Contains(out, "on a log, the drain of the tasks in flight") || !strings.Contains(out, "on a log within about 5.625s") {
		t.Errorf("a plan at 5s: want the fenced handoff's pause and assignment on a log\n%s", out)
	}
	// KEDA's target: a worker's rate times the drain allowed, and what a
	// group at zero waits for its first task.
	code, out, _ = nandi(t, ctx, "plan", "-worker-rate", "400", "-drain", "5s")
	if code != 0 || !strings.Contains(out, "2000 entries per worker") || !strings.Contains(out, "the first lease (10s to 15s)") {
		t.Errorf("a plan with -worker-rate 400 -drain 5s: exit %d\n%s", code, out)
	}
	if code, _, errOut := nandi(t, ctx, "plan", "-worker-rate", "400", "-drain", "0s"); code != 2 || !strings.Contains(errOut, "-drain must be positive") {
		t.Errorf("-drain 0: exit %d, %q; want a usage error", code, errOut)
	}
	code, out, _ = nandi(t, ctx, "plan", "-interval", "1s", "-gap", "0.05", "-rtt", "40ms", "-jitter", "20ms", "-workers", "20")
	if code != 1 || !strings.Contains(out, "verdict: FAIL") || !strings.Contains(out, "not inside the gap") {
		t.Errorf("a gap narrower than the round trip: exit %d\n%s", code, out)
	}
	code, out, _ = nandi(t, ctx, "plan", "-interval", "5s", "-gap", "0.125", "-rtt", "1ms", "-jitter", "30ms", "-workers", "1000")
	if code != 0 || !strings.Contains(out, "verdict: OK") || strings.Contains(out, "swap") {
		t.Errorf("jitter wider than the spacing, inside the gap (indexes are kept whatever the order): exit %d\n%s", code, out)
	}
	if code, _, errOut := nandi(t, ctx, "plan", "-gap", "0.5"); code != 2 || !strings.Contains(errOut, "Gap") {
		t.Errorf("an invalid gap: exit %d, %q; want 2 (a usage error) and the option's error", code, errOut)
	}
	s := redistest.Start(t)
	code, out, errOut := nandi(t, ctx, "plan", "-redis", "redis://"+s.Addr(), "-workers", "50")
	if code != 0 || !strings.Contains(out, "round trip") || strings.Contains(out, "round trip 1ms, jitter 0s") {
		t.Errorf("plan measuring a local Redis: exit %d\n%s%s", code, out, errOut)
	}
}

// runGroup runs a one-worker group named name on c until the test ends,
// and waits until it holds its share and has written checkpoints.
func runGroup(t *testing.T, c redis.UniversalClient, name string) {
	t.Helper()
	l, err := partition.New(c, partition.Options{Name: name, Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	log := memory.NewLog(1)
	log.Append("1", nil)
	cons, err := consumer.New(l, log.Source(), func(context.Context, *transport.Message) error { return nil },
		consumer.Options{CheckpointInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	redistest.WaitFor(t, 10*time.Second, "the group to hold and checkpoint", func() bool {
		return cons.Stats().Handled == 1 && cons.Stats().Checkpoints > 0
	})
}

// statusOK runs status -json with url and checks that it read the group.
func statusOK(t *testing.T, url, group string) {
	t.Helper()
	code, out, errOut := nandi(t, context.Background(), "status", "-redis", url, "-group", group, "-json")
	var st Status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Generation == "" || len(st.Epochs) == 0 {
		t.Errorf("status -redis %s: exit %d, %s%s; want the group's state", url, code, out, errOut)
	}
}

// -redis reaches a group on a Redis Cluster (from any node's plain URL, or
// the cluster form) and behind Sentinels (the failover forms).
func TestStatusOverClusterAndSentinel(t *testing.T) {
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3, 0)
		runGroup(t, cl.Client(), "mail")
		owner := cl.NodeFor("{mail}:lease")
		var other *redistest.Server
		for _, n := range cl.Nodes {
			if n != owner {
				other = n
			}
		}
		statusOK(t, "redis://"+other.Addr(), "mail") // a node that does not hold the group's slot
		statusOK(t, "redis+cluster://"+other.Addr(), "mail")
		statusOK(t, "redis://"+other.Addr()+"?addr="+owner.Addr(), "mail")
	})
	t.Run("sentinel", func(t *testing.T) {
		ss := redistest.StartSentinels(t, 1, 3)
		runGroup(t, ss.Client(), "mail")
		statusOK(t, ss.URL(), "mail")
		statusOK(t, "redis+sentinel://"+ss.Addrs()[1]+"?master_name="+redistest.MasterName, "mail")
		code, _, errOut := nandi(t, context.Background(), "status", "-redis", "redis+sentinel://"+ss.Addrs()[0], "-group", "mail")
		if code != 2 || !strings.Contains(errOut, "master_name") {
			t.Errorf("a Sentinel URL without the master's name: exit %d, %q; want 2 and how to name it", code, errOut)
		}
	})
	code, _, errOut := nandi(t, context.Background(), "status", "-redis", "redis+nosuch://localhost:1", "-group", "mail")
	if code != 2 || !strings.Contains(errOut, "unknown scheme") {
		t.Errorf("an unknown scheme: exit %d, %q; want 2 and the schemes accepted", code, errOut)
	}
}
