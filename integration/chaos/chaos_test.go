package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nandi-go/nandi/internal/faultproxy"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// chaosScale multiplies the tasks (and the time they are produced over) of
// every scenario: 1 in make test, 10 in make chaos (NANDI_CHAOS_SCALE).
var chaosScale = func() int {
	if n, err := strconv.Atoi(os.Getenv("NANDI_CHAOS_SCALE")); err == nil && n > 0 {
		return n
	}
	return 1
}()

// fleet is a group of worker processes and the servers they use.
type fleet struct {
	t              testing.TB
	main, sink     *redistest.Server
	dir, group     string
	interval, work time.Duration
	procs          map[int]*proc
	next           int
	waitReplicas   int
	extra          []string             // environment for every worker rolls start (rolling_bench_test.go)
	cluster        *redistest.Cluster   // set: the workers use it, with no proxies
	sentinels      *redistest.Sentinels // set: the workers use a FailoverClient, with no proxies
	store          redis.UniversalClient
	stopAt         int64 // mono: when finish began stopping the workers
	faultAt        int64 // mono: the last fault, from mark
	// source, when set, is the tasks' log of another transport
	// (envSource), at srcAddr; publish writes task x's s-th to it.
	source, srcAddr string
	publish         func(x, s int)
}

// mark records a fault's moment (mono) and returns it: finish lets the
// group run long enough after it to show that it re-formed.
func (f *fleet) mark() int64 {
	f.faultAt = mono()
	return f.faultAt
}

// afterFault waits until the re-form bound (10 intervals), two whole
// intervals and one for the records have passed since the last mark.
func (f *fleet) afterFault() {
	if f.faultAt == 0 {
		return
	}
	if d := time.Duration(f.faultAt + int64(13*f.interval) - mono()); d > 0 {
		time.Sleep(d)
	}
}

type proc struct {
	cmd      *exec.Cmd
	proxy    *faultproxy.Proxy
	srcProxy *faultproxy.Proxy // the worker's link to a JetStream server, when that is its source
	done     chan error
}

func newFleet(t testing.TB, interval time.Duration) *fleet {
	f := &fleet{t: t, main: redistest.Start(t), sink: redistest.Start(t), dir: recordDir(t),
		group: strings.ReplaceAll(t.Name(), "/", "-"), interval: interval, work: 2 * time.Millisecond, procs: map[int]*proc{}}
	f.store = f.main.Client()
	t.Cleanup(func() {
		for _, p := range f.procs {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return f
}

// recordDir is where the workers' records and logs go: a test's temporary
// directory, or, with NANDI_CHAOS_KEEP set, a directory that is kept and
// named in the test's log.
func recordDir(t testing.TB) string {
	if os.Getenv("NANDI_CHAOS_KEEP") == "" {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("", "nandi-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("records and logs kept in %s", dir)
	return dir
}

// start starts a worker process behind its own proxy.
func (f *fleet) start() int { return f.startWith(f.interval) }

// startWith starts a worker with its own interval, and extra environment
// ("NAME=value") for it.
func (f *fleet) startWith(interval time.Duration, extra ...string) int {
	f.next++
	id := f.next
	p := &proc{done: make(chan error, 1)}
	redisEnv := []string{}
	if f.cluster != nil {
		var addrs []string
		for _, n := range f.cluster.Nodes {
			addrs = append(addrs, n.Addr())
		}
		redisEnv = append(redisEnv, envRedis+"="+strings.Join(addrs, ","), envCluster+"=1")
	} else if f.sentinels != nil {
		redisEnv = append(redisEnv, envRedis+"="+strings.Join(f.sentinels.Addrs(), ","), envSentinel+"="+redistest.MasterName)
	} else {
		p.proxy = faultproxy.New(f.t, f.main.Addr())
		redisEnv = append(redisEnv, envRedis+"="+p.proxy.Addr())
	}
	switch f.source {
	case "jetstream":
		p.srcProxy = faultproxy.New(f.t, f.srcAddr) // a TCP proxy: NATS passes too
		redisEnv = append(redisEnv, envSource+"="+f.source, envSrcAddr+"=nats://"+p.srcProxy.Addr())
	case "kafka":
		// Straight to kfake: a Kafka client connects to the brokers its
		// metadata names, whatever address it was given.
		redisEnv = append(redisEnv, envSource+"="+f.source, envSrcAddr+"="+f.srcAddr)
	}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(append(append(os.Environ(), redisEnv...),
		envWorker+"="+strconv.Itoa(id), envSink+"="+f.sink.Addr(),
		envGroup+"="+f.group, envInterval+"="+interval.String(), envWork+"="+f.work.String(), envWait+"="+strconv.Itoa(f.waitReplicas),
		envRecord+"="+filepath.Join(f.dir, fmt.Sprintf("worker-%d.jsonl", id))), extra...)
	logf, _ := os.Create(filepath.Join(f.dir, fmt.Sprintf("worker-%d.log", id)))
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait(); _ = logf.Close() }()
	f.procs[id] = p
	return id
}

func (f *fleet) signal(id int, s syscall.Signal) {
	if err := f.procs[id].cmd.Process.Signal(s); err != nil {
		f.t.Fatalf("worker %d: %v: %v", id, s, err)
	}
}

// term is a clean stop (SIGTERM) and waits for the process to exit 0.
func (f *fleet) term(id int) {
	f.signal(id, syscall.SIGTERM)
	select {
	case err := <-f.procs[id].done:
		if err != nil {
			f.t.Errorf("worker %d exited with %v after SIGTERM", id, err)
		}
	case <-time.After(30 * time.Second):
		f.t.Fatalf("worker %d did not exit within 30s of SIGTERM", id)
	}
	delete(f.procs, id)
}

// kill is kill -9.
func (f *fleet) kill(id int) {
	_ = f.procs[id].cmd.Process.Kill()
	<-f.procs[id].done
	delete(f.procs, id)
}

// produce appends ids x each tasks ("id" field, payload the sequence)
// over about spread, in the background.
func (f *fleet) produce(ids, each int, spread time.Duration) chan struct{} {
	c := f.store
	done := make(chan struct{})
	go func() {
		defer close(done)
		spread *= time.Duration(chaosScale)
		pause := spread / time.Duration(each*ids/50)
		for s := range each {
			for x := range ids {
				if f.publish != nil {
					f.publish(x, s)
				} else {
					c.XAdd(context.Background(), &redis.XAddArgs{Stream: taskStream(f.group), Values: []any{"id", x, "payload", s}})
				}
				if x%50 == 49 {
					time.Sleep(pause)
				}
			}
		}
	}()
	return done
}

// effects waits until every task has an accepted effect (or 30s), and
// returns the sink's effects.
func (f *fleet) effects(total int) map[string]int {
	c := f.sink.Client()
	var got map[string]int
	redistest.WaitFor(f.t, time.Duration(30*chaosScale)*time.Second, "every task's effect", func() bool {
		list, _ := c.LRange(context.Background(), "effects", 0, -1).Result()
		got = effects(list)
		return len(got) >= total
	})
	time.Sleep(3 * f.interval) // anything done twice lands now
	list, _ := c.LRange(context.Background(), "effects", 0, -1).Result()
	return effects(list)
}

// finish waits for every task's effect, stops every worker cleanly and
// verifies.
func (f *fleet) finish(ids, each int, exact bool) *history {
	got := f.effects(ids * each)
	f.afterFault()
	f.stopAt = mono()
	for id := range f.procs {
		f.term(id)
	}
	return f.verify(ids, each, exact, got)
}

// verify checks the records (exclusive holdings, every task started by its
// owner) and the effects: every task at least once, exactly once if exact.
func (f *fleet) verify(ids, each int, exact bool, got map[string]int) *history {
	h, err := readHistory(f.dir)
	if err != nil {
		f.t.Fatal(err)
	}
	if len(h.holds) == 0 {
		f.t.Fatal("no holding recorded")
	}
	for i, v := range append(append(h.exclusive(), h.owned()...), h.serving()...) {
		if i < 10 {
			f.t.Error(v)
		}
	}
	missing, twice := 0, 0
	for x := range ids {
		for s := range each {
			switch n := got[taskKey(x, s)]; {
			case n == 0:
				if missing++; missing <= 5 {
					f.t.Errorf("task %d/%d has no effect", x, s)
				}
			case n > 1:
				twice++
				if exact && twice <= 5 {
					f.t.Errorf("task %d/%d took effect %d times", x, s, n)
				}
			}
		}
	}
	refused := 0
	for _, d := range h.dones {
		if !d.Accepted {
			refused++
		}
	}
	f.t.Logf("%d holdings, %d task starts, %d tasks repeated, %d missing, %d stale writes refused by the sink", len(h.holds), len(h.starts), twice, missing, refused)
	return h
}

// 3 -> 8 -> 2 workers by SIGTERM and start, tasks flowing: exactly once.
func TestChurnBySIGTERMIsExactlyOnce(t *testing.T) {
	f := newFleet(t, 300*time.Millisecond)
	ids, each := 300*chaosScale, 5
	for range 3 {
		f.start()
	}
	produced := f.produce(ids, each, 5*time.Second)
	time.Sleep(1500 * time.Millisecond)
	grew := f.mark()
	for range 5 {
		f.start()
	}
	time.Sleep(13 * f.interval) // the bound, two intervals whole, and one for the records
	h, _ := readHistory(f.dir)
	f.reform(h, grew, 8, 10*f.interval, "growing from 3 to 8")
	var shrank int64
	for _, id := range []int{1, 2, 3, 4, 5, 6} {
		shrank = f.mark() // the last of six SIGTERMs is the change measured
		f.term(id)        // one after the other: each waits for the exit
	}
	<-produced
	h = f.finish(ids, each, true)
	f.reform(h, shrank, 2, 10*f.interval, "shrinking from 8 to 2 (from the last SIGTERM)")
}

// 4 -> 2 workers by SIGTERM with ServeToCap, tasks flowing: a leaver
// serves its share to its lease's cap after the signal, then drains and
// exits; every task exactly once, never two holders, every task started
// under its lease (the leavers' terms recorded until they exit).
func TestLeavingBySIGTERMWithServeToCapIsExactlyOnce(t *testing.T) {
	f := newFleet(t, 300*time.Millisecond)
	ids, each := 200*chaosScale, 5
	for range 4 {
		f.startWith(f.interval, envServe+"=1")
	}
	produced := f.produce(ids, each, 4*time.Second)
	time.Sleep(2*time.Second + time.Duration(rand.Int64N(int64(f.interval))))
	var left int64
	signalled := map[int]int64{}
	for _, id := range []int{1, 2} {
		left = f.mark()
		signalled[id] = left
		start := time.Now()
		f.term(id)
		if took := time.Since(start); took > 2*f.interval+time.Second {
			t.Errorf("worker %d exited %v after SIGTERM; want within two intervals and the drain", id, took)
		}
	}
	<-produced
	h := f.finish(ids, each, true)
	f.reform(h, left, 2, 10*f.interval, "the last SIGTERM")
	// The first leaver was signalled in a settled group: its term was
	// renewed in the interval it was signalled in or the one before, so its
	// cap is most of an interval away at least. The second was signalled
	// during the handover the first began, its term already kept to a cap
	// that may be close or past: it only has to exit in time.
	served := 0
	for _, d := range h.dones {
		if d.Worker == 1 && d.At > signalled[1]+int64(f.interval/4) {
			served++
		}
	}
	if served == 0 {
		t.Errorf("worker 1 did no task a quarter interval after its SIGTERM; want it serving its share to its cap")
	}
}

// kill -9 of a worker holding work: every task at least once, and only
// tasks the killed worker had done are done again.
func TestKill9RepeatsOnlyTheKilledWorkersWork(t *testing.T) {
	f := newFleet(t, 300*time.Millisecond)
	f.faultOnce(300*chaosScale, 5, 3*time.Second, 2*time.Second, false, func() (int64, string) {
		killed := f.mark()
		f.kill(2)
		f.start()
		return killed, "kill -9 and a new worker"
	})
	list, _ := f.sink.Client().LRange(context.Background(), "effects", 0, -1).Result()
	first := map[string]string{}
	for _, e := range list {
		p := strings.Split(e, "/")
		k := p[0] + "/" + p[1]
		if w, seen := first[k]; seen && w != "2" {
			t.Errorf("task %s repeated, first done by worker %s, which was not killed", k, w)
		} else if !seen {
			first[k] = p[2]
		}
	}
}

// SIGSTOP for longer than a lease, in the middle of tasks, then SIGCONT:
// never two holders, no task started without its lease, every task done.
func TestPauseLongerThanALease(t *testing.T) {
	// make test pauses for 3 intervals; make chaos sweeps 0.5 to 5.
	pauses := []float64{3}
	if chaosScale > 1 {
		pauses = []float64{0.5, 1, 1.5, 2, 3, 5}
	}
	for _, p := range pauses {
		t.Run(fmt.Sprintf("%.1f intervals", p), func(t *testing.T) {
			f := newFleet(t, 300*time.Millisecond)
			f.work = 20 * time.Millisecond // so that the pause lands inside tasks
			settle := 2*time.Second + time.Duration(rand.Int64N(int64(f.interval)))
			f.faultOnce(200*chaosScale, 4, 3*time.Second, settle, false, func() (int64, string) {
				f.signal(2, syscall.SIGSTOP)
				time.Sleep(time.Duration(p * float64(f.interval)))
				f.signal(2, syscall.SIGCONT)
				return f.mark(), "SIGCONT"
			})
		})
	}
}

// Faults during a handoff: a worker joins a settled group of 3, and about
// an interval later, while every old holder serves its lease to its cap
// (the lease is no longer renewed after the change), one of them is
// stopped across its cap (SIGSTOP for 2 intervals), or killed -9, or a
// second worker joins. Never two holders, no task started without its
// lease, every task done (exactly once on the clean second join), and
// the group re-forms. make test runs the SIGSTOP; make chaos all three.
func TestFaultsDuringAHandoff(t *testing.T) {
	type fault struct {
		name  string
		exact bool
		n     int // workers at the end
		do    func(f *fleet)
	}
	faults := []fault{{"SIGSTOP across the cap", false, 4, func(f *fleet) {
		f.signal(2, syscall.SIGSTOP)
		time.Sleep(2 * f.interval)
		f.signal(2, syscall.SIGCONT)
	}}}
	if chaosScale > 1 {
		faults = append(faults,
			fault{"kill -9 while kept", false, 3, func(f *fleet) { f.kill(2) }},
			fault{"a second join", true, 5, func(f *fleet) { f.start() }})
	}
	for _, ft := range faults {
		t.Run(ft.name, func(t *testing.T) {
			f := newFleet(t, 300*time.Millisecond)
			f.work = 20 * time.Millisecond // so that the fault lands inside tasks
			ids, each := 200*chaosScale, 4
			for range 3 {
				f.start()
			}
			produced := f.produce(ids, each, 3*time.Second)
			time.Sleep(2*time.Second + time.Duration(rand.Int64N(int64(f.interval))))
			f.start()
			time.Sleep(f.interval + time.Duration(rand.Int64N(int64(f.interval/2))))
			ft.do(f)
			at := f.mark()
			<-produced
			h := f.finish(ids, each, ft.exact)
			f.reform(h, at, ft.n, 10*f.interval, ft.name)
		})
	}
}

// A store that stops answering one worker (its link holds every byte):
// its lease runs out on its clock, the others take over, and it comes back.
func TestStoreThatStopsAnsweringOneWorker(t *testing.T) {
	f := newFleet(t, 300*time.Millisecond)
	f.faultOnce(200*chaosScale, 4, 3*time.Second, 2*time.Second, false, func() (int64, string) {
		f.procs[2].proxy.Hold()
		time.Sleep(4 * f.interval)
		f.procs[2].proxy.Release()
		return f.mark(), "the link answering again"
	})
}

// Replies lost after the server ran the script (the connection closes as
// each reply arrives): registrations must not count twice, so the group
// settles back on 3 replicas.
func TestLostRepliesNeverCountTwice(t *testing.T) {
	f := newFleet(t, 300*time.Millisecond)
	ids, each := 200*chaosScale, 4
	for range 3 {
		f.start()
	}
	produced := f.produce(ids, each, 3*time.Second)
	time.Sleep(2 * time.Second)
	dropped := f.mark()
	f.procs[2].proxy.DropReplies()
	time.Sleep(3 * f.interval)
	f.procs[2].proxy.Remove("drop")
	time.Sleep(5 * f.interval) // settled again, if nothing counted twice
	at := mono()
	time.Sleep(f.interval) // its records are written
	h, _ := readHistory(f.dir)
	// While worker 2's replies were lost, its retries carried the same
	// token: counted at most once per interval, the group never saw more
	// than 3 members (2 is fine: a call whose connection handshake lost
	// its reply never reached the script).
	for _, hd := range h.holds {
		if hd.start >= dropped && hd.start <= at && hd.replicas > 3 {
			t.Errorf("%v began while replies were lost; want at most 3 replicas (a registration counted twice)", hd)
		}
	}
	for id := range f.procs {
		var now *holding
		for i, hd := range h.holds {
			if hd.worker == id && hd.start <= at && at < hd.end {
				now = &h.holds[i]
			}
		}
		switch {
		case now == nil:
			t.Errorf("worker %d holds nothing 5 intervals after its replies came back", id)
		case now.replicas != 3:
			t.Errorf("worker %d holds %v; want a share of 3 (a lost reply counted twice?)", id, *now)
		}
	}
	<-produced
	h = f.finish(ids, each, false)
	f.reform(h, dropped, 3, 10*f.interval, "replies lost for 3 intervals")
}

// Latency with jitter well inside the gap does not make a settled group
// stand down.
func TestJitterInsideTheGapCausesNoStandDown(t *testing.T) {
	f := newFleet(t, 300*time.Millisecond)
	ids, each := 200*chaosScale, 4
	for range 3 {
		f.start()
	}
	produced := f.produce(ids, each, 4*time.Second)
	time.Sleep(2 * time.Second)
	h0, _ := readHistory(f.dir)
	for _, p := range f.procs {
		p.proxy.Latency(5, 3)
	}
	time.Sleep(10 * f.interval)
	h1, _ := readHistory(f.dir)
	for _, p := range f.procs {
		p.proxy.Remove("latency")
	}
	if len(h1.holds) != len(h0.holds) {
		t.Errorf("%d holdings began during 10 intervals of 5±3ms latency; want none (a stand-down)", len(h1.holds)-len(h0.holds))
	}
	<-produced
	f.finish(ids, each, true)
}

// A worker whose interval differs from the group's gets an error and never
// holds; the group goes on undisturbed.
func TestWorkerWithAnotherIntervalIsRefused(t *testing.T) {
	f := newFleet(t, 300*time.Millisecond)
	ids, each := 200*chaosScale, 3
	for range 3 {
		f.start()
	}
	produced := f.produce(ids, each, 3*time.Second)
	time.Sleep(2 * time.Second)
	joined := mono()
	odd := f.startWith(500 * time.Millisecond)
	select {
	case err := <-f.procs[odd].done:
		if err == nil {
			t.Error("the worker with another interval exited 0; want an error")
		}
		delete(f.procs, odd)
	case <-time.After(10 * time.Second):
		t.Fatal("the worker with another interval is still running")
	}
	log, _ := os.ReadFile(filepath.Join(f.dir, fmt.Sprintf("worker-%d.log", odd)))
	if !strings.Contains(string(log), "interval") {
		t.Errorf("its error does not say what differs: %q", log)
	}
	time.Sleep(3 * f.interval)
	h1, _ := readHistory(f.dir)
	// Undisturbed: the odd worker was never counted, so no term of
	// another replicas began, and it never held anything.
	for _, hd := range h1.holds {
		if hd.start >= joined && (hd.replicas != 3 || hd.worker == odd) {
			t.Errorf("%v began after the odd worker tried to join; want only shares of 3, none its", hd)
		}
	}
	<-produced
	f.finish(ids, each, true)
}

// Redis restarted with AOF (everysec) at a random moment: a new generation,
// never two holders, every task done at least once.
func TestRedisRestartWithAOF(t *testing.T) {
	f := newFleet(t, 300*time.Millisecond)
	f.main = redistest.Start(t, "--appendonly", "yes", "--appendfsync", "everysec")
	f.store = f.main.Client()
	settle := 1500*time.Millisecond + time.Duration(rand.Int64N(int64(f.interval)))
	f.faultOnce(200*chaosScale, 4, 3*time.Second, settle, false, func() (int64, string) {
		restarted := f.mark()
		f.main.Restart()
		return restarted, "the restart"
	})
}

// Replica promotion: the master dies, its replica is promoted and every
// worker's proxy is switched to it; with and without WaitReplicas. A new
// generation, never two holders, and every task (all written, and
// replicated, before the failover) done at least once.
func TestReplicaPromotion(t *testing.T) {
	for _, wait := range []int{0, 1} {
		t.Run("WaitReplicas="+strconv.Itoa(wait), func(t *testing.T) {
			f := newFleet(t, 300*time.Millisecond)
			replica := redistest.StartReplica(t, f.main)
			f.waitReplicas = wait
			f.work = 20 * time.Millisecond // so that the failover lands in the middle of the work
			ids, each := 200*chaosScale, 4
			<-f.produce(ids, each, 200*time.Millisecond)
			for range 3 {
				f.start()
			}
			time.Sleep(1500*time.Millisecond + time.Duration(rand.Int64N(int64(f.interval))))
			f.main.Kill()
			replica.Promote()
			for _, p := range f.procs {
				p.proxy.SetUpstream(replica.Addr())
			}
			promoted := f.mark()
			if wait > 0 {
				// The promoted replica has none of its own: nothing is
				// acknowledged, so the leases run out, until one is added.
				time.Sleep(3 * f.interval)
				_ = redistest.StartReplica(t, replica)
				promoted = f.mark()
			}
			h := f.finish(ids, each, false)
			f.reform(h, promoted, 3, 10*f.interval, "the promotion")
		})
	}
}

// Redis Sentinel as users run it: a master, two replicas and three
// Sentinels; the workers on go-redis's FailoverClient. The master is
// killed with tasks in flight; the Sentinels promote a replica, the other
// follows it, and the clients find it. With and without WaitReplicas:
// never two holders, no task started outside its lease, every task done,
// the group re-formed within the failover's time and 10 intervals, and
// only work finished in the last interval before the kill (not yet
// checkpointed, or checkpointed and not yet replicated) done again.
func TestSentinelFailover(t *testing.T) {
	for _, wait := range []int{0, 1} {
		t.Run("WaitReplicas="+strconv.Itoa(wait), func(t *testing.T) {
			ss := redistest.StartSentinels(t, 2, 3)
			f := newFleet(t, 300*time.Millisecond)
			f.sentinels, f.store, f.waitReplicas = ss, ss.Client(), wait
			f.work = 20 * time.Millisecond // so that the failover lands in the middle of the work
			ids, each := 200*chaosScale, 4
			<-f.produce(ids, each, 200*time.Millisecond)
			if _, err := ss.Master().Do("WAIT", 2, 5000); err != nil { // the failover loses no task
				t.Fatal(err)
			}
			for range 3 {
				f.start()
			}
			time.Sleep(1500*time.Millisecond + time.Duration(rand.Int64N(int64(f.interval))))
			old := ss.Master()
			killed := f.mark()
			old.Kill()
			promoted := ss.WaitFailover(old)
			t.Logf("the Sentinels promoted %s %v after the kill", promoted.Addr(), time.Duration(mono()-killed).Round(time.Millisecond))
			f.mark() // finish runs the group on long enough after the promotion
			h := f.finish(ids, each, false)
			// Sentinel declares the master down after 500ms, elects a leader
			// and promotes; go-redis follows on +switch-master.
			f.reform(h, killed, 3, 3*time.Second+10*f.interval, "the Sentinel failover")
			for i, v := range h.repeatedBefore(killed - int64(f.interval)) {
				if i < 10 {
					t.Error(v)
				}
			}
		})
	}
}

// Redis restarted empty (no persistence) at a random moment: the tasks and
// the checkpoints are gone with it, but a new generation means never two
// holders, no task started outside its lease, and the group re-forms on
// the empty server.
func TestRedisRestartedEmpty(t *testing.T) {
	f := newFleet(t, 300*time.Millisecond)
	f.work = 5 * time.Millisecond
	ids, each := 200*chaosScale, 4
	for range 3 {
		f.start()
	}
	produced := f.produce(ids, each, 2*time.Second)
	time.Sleep(1500*time.Millisecond + time.Duration(rand.Int64N(int64(f.interval))))
	restarted := f.mark()
	f.main.Restart()
	<-produced
	time.Sleep(8 * f.interval)
	f.afterFault()
	f.stopAt = mono()
	for id := range f.procs {
		f.term(id)
	}
	h, err := readHistory(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range append(append(h.exclusive(), h.owned()...), h.serving()...) {
		if i < 10 {
			t.Error(v)
		}
	}
	f.reformed(h, restarted, 3, "the restart")
	f.reform(h, restarted, 3, 10*f.interval, "the restart")
}

// reform checks that the group of n re-formed (every index of n held,
// without a break, for two intervals) within bound of the fault at at
// (mono), and logs how long that took: 0 when the fault never broke it.
func (f *fleet) reform(h *history, at int64, n int, bound time.Duration, fault string) {
	f.t.Helper()
	until := mono() - int64(f.interval) // every record before this is written
	if f.stopAt > at {
		until = f.stopAt
	}
	w, ok := h.settled(at, until, n, int64(2*f.interval))
	switch {
	case !ok:
		f.t.Errorf("the group of %d was never whole for two intervals after %s", n, fault)
	case time.Duration(w-at) > bound:
		f.t.Errorf("the group of %d re-formed %v after %s; want within %v", n, time.Duration(w-at).Round(time.Millisecond), fault, bound)
	default:
		f.t.Logf("re-formed %v after %s (bound %v)", time.Duration(w-at).Round(time.Millisecond), fault, bound)
	}
}

// faultOnce is the shape most scenarios share: three workers, ids x each
// tasks produced over spread (scaled), the fault after settle (fault
// returns its moment, from mark, and what it was), then every task at
// least once (exactly once if exact) and the group re-formed within 10
// intervals of the fault.
func (f *fleet) faultOnce(ids, each int, spread, settle time.Duration, exact bool, fault func() (int64, string)) *history {
	f.t.Helper()
	for range 3 {
		f.start()
	}
	produced := f.produce(ids, each, spread)
	time.Sleep(settle)
	at, what := fault()
	<-produced
	h := f.finish(ids, each, exact)
	f.reform(h, at, 3, 10*f.interval, what)
	return h
}

// reformed checks that every one of n workers began a holding of a share of
// n after the moment at (mono): the group re-formed after the fault.
func (f *fleet) reformed(h *history, at int64, n int, fault string) {
	f.t.Helper()
	after := map[int]bool{}
	for _, hd := range h.holds {
		if hd.start > at && hd.replicas == n {
			after[hd.worker] = true
		}
	}
	if len(after) != n {
		f.t.Errorf("%d of %d workers held a share of %d after %s; want all (the group re-forms)", len(after), n, n, fault)
	}
}

// A worker whose clock runs 1% fast or slow (a hundred times what a quartz
// clock drifts), next to two on the host's clock: never two holders, every
// task exactly once, and the settled group does not stand down.
func TestClockRunningFastOrSlow(t *testing.T) {
	for _, rate := range []float64{1.01, 0.99} {
		t.Run(fmt.Sprintf("rate %.2f", rate), func(t *testing.T) {
			f := newFleet(t, 300*time.Millisecond)
			ids, each := 200*chaosScale, 4
			f.start()
			f.startWith(f.interval, envRate+"="+strconv.FormatFloat(rate, 'f', -1, 64))
			f.start()
			produced := f.produce(ids, each, 4*time.Second)
			time.Sleep(2 * time.Second)
			h0, _ := readHistory(f.dir)
			time.Sleep(10 * f.interval)
			h1, _ := readHistory(f.dir)
			if len(h1.holds) != len(h0.holds) {
				t.Errorf("%d holdings began during 10 settled intervals; want none (a stand-down)", len(h1.holds)-len(h0.holds))
			}
			<-produced
			f.finish(ids, each, true)
		})
	}
}

// Redis Cluster, three masters with a replica each: the group's slot is
// migrated to another master key by key, then that master is killed and
// its replica takes over. Each is a new store generation; never two
// holders, no task started outside its lease, every task (all written
// before the faults) done at least once, and the group re-forms after each.
func TestClusterSlotMigrationAndFailover(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	for _, wait := range []int{0, 1} {
		t.Run("WaitReplicas="+strconv.Itoa(wait), func(t *testing.T) {
			f := newFleet(t, 300*time.Millisecond)
			f.cluster, f.store, f.waitReplicas = cl, cl.Client(), wait
			f.work = 30 * time.Millisecond // so that the faults land in the middle of the work
			ids, each := 150*chaosScale, 4
			<-f.produce(ids, each, 200*time.Millisecond)
			cl.WaitSynced() // the failover loses no task, only checkpoints
			for range 3 {
				f.start()
			}
			time.Sleep(1500*time.Millisecond + time.Duration(rand.Int64N(int64(f.interval))))
			key := "{" + f.group + "}:lease"
			from := cl.NodeFor(key)
			to := cl.Masters()[0]
			if to == from {
				to = cl.Masters()[1]
			}
			migrated := f.mark()
			cl.MigrateSlot(key, from, to)
			time.Sleep(13 * f.interval) // the bound, two intervals whole, and one for the records
			h, _ := readHistory(f.dir)
			f.reformed(h, migrated, 3, "the slot migration")
			f.reform(h, migrated, 3, 10*f.interval, "the slot migration")
			replica := cl.ReplicaOf(to)
			failed := f.mark()
			to.Kill()
			replica.Takeover()
			if wait > 0 {
				// The new master has no replica to acknowledge: nothing
				// registers until one is added.
				time.Sleep(3 * f.interval)
				cl.AddReplica(replica)
				failed = f.mark()
			}
			time.Sleep(2*time.Second + 13*f.interval)
			h, _ = readHistory(f.dir)
			f.reformed(h, failed, 3, "the failover")
			// go-redis learns the new master on its next reload; the
			// cluster's node timeout is 1s.
			f.reform(h, failed, 3, 2*time.Second+10*f.interval, "the failover")
			f.finish(ids, each, false)
		})
	}
}
