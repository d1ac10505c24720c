package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
)

// nandi checkpoint reset refuses while the group runs; stopped, its dry
// run says what it would redo and changes nothing; then the group started
// again does exactly the tasks from the reset point on, each once, and
// nothing before it.
func TestCheckpointResetEndToEnd(t *testing.T) {
	s := redistest.Start(t)
	const iv = 200 * time.Millisecond
	log := memory.NewLog(2)
	for i := range 300 {
		log.Append(strconv.Itoa(i), nil)
	}
	ctx := context.Background()
	var mu sync.Mutex
	handled := map[string]int{} // "shard/position" -> times
	record := func(_ context.Context, m *transport.Message) error {
		mu.Lock()
		handled[fmt.Sprintf("%d/%d", m.Shard, m.Position.Lo)]++
		mu.Unlock()
		return nil
	}
	total := log.Len(0) + log.Len(1)
	run := func() {
		gctx, stop := context.WithCancel(ctx)
		g := newTestGroup(t, s.Client(), "resettable", iv, log, record, consumer.Options{CheckpointInterval: 20 * time.Millisecond})
		g.ctx = gctx
		g.start("w1")
		g.start("w2")
		redistest.WaitFor(t, 20*time.Second, "every task", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(handled) == total
		})
		time.Sleep(2 * iv) // checkpoints written
		if code, _, errOut := nandi(t, ctx, "checkpoint", "reset", "-redis", "redis://"+s.Addr(), "-group", "resettable", "-to", "start"); code != 1 || !strings.Contains(errOut, "the group is running") {
			t.Errorf("reset while the group runs: exit %d, %q; want 1 and why", code, errOut)
		}
		// The dry run answers while the group runs, and says the reset
		// itself would be refused.
		code, out, errOut := nandi(t, ctx, "checkpoint", "reset", "-redis", "redis://"+s.Addr(), "-group", "resettable", "-to", "start", "-dry-run")
		if code != 0 || !strings.Contains(out, "would reset") || !strings.Contains(out, "the group is running: the reset itself is refused") {
			t.Errorf("dry run while the group runs: exit %d; want 0, what it would do, and that the reset is refused while it runs\n%s%s", code, out, errOut)
		}
		stop()
		g.wg.Wait()
	}
	run()
	time.Sleep(3 * iv) // three intervals after the last registration
	url := "redis://" + s.Addr()

	before, err := checkpoint.NewRedis(s.Client(), "resettable").Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := nandi(t, ctx, "checkpoint", "reset", "-redis", url, "-group", "resettable", "-to", "100", "-dry-run")
	if code != 0 || !strings.Contains(out, "would reset") || !strings.Contains(out, "redo from 100") {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("nandi checkpoint reset -to 100 -dry-run:\n%s", out)
	for sh := range 2 {
		if want := fmt.Sprintf("shard %d: would redo %d entries (from 100 to %d)", sh, log.Len(sh)-100, log.Len(sh)); !strings.Contains(out, want) {
			t.Errorf("the dry run does not say %q", want)
		}
	}
	if strings.Contains(out, "the group is running") {
		t.Errorf("the dry run of a stopped group says it runs:\n%s", out)
	}
	_, doc := docCommand(t, "checkpoint reset") // the sample in docs/cli.md
	sameShape(t, "nandi checkpoint reset -dry-run", doc, out)
	if after, _ := checkpoint.NewRedis(s.Client(), "resettable").Read(ctx); after.Current.N != before.Current.N {
		t.Fatalf("the dry run changed the epoch from %d to %d", before.Current.N, after.Current.N)
	}
	code, out, errOut = nandi(t, ctx, "checkpoint", "reset", "-redis", url, "-group", "resettable", "-to", "100")
	if code != 0 {
		t.Fatalf("reset: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := nandi(t, ctx, "status", "-redis", url, "-group", "resettable"); code != 0 || !strings.Contains(out, "(reset ") {
		t.Errorf("status after the reset does not show it:\n%s", out)
	}

	mu.Lock()
	clear(handled)
	mu.Unlock()
	want := map[string]bool{}
	for sh := range 2 {
		for p := 100; p < log.Len(sh); p++ {
			want[fmt.Sprintf("%d/%d", sh, p)] = true
		}
	}
	total = len(want)
	run()
	mu.Lock()
	defer mu.Unlock()
	for k, n := range handled {
		if !want[k] {
			t.Errorf("task %s, before the reset point, done again", k)
		} else if n != 1 {
			t.Errorf("task %s done %d times after the reset; want once", k, n)
		}
	}
	t.Logf("figures: after a reset to 100, %d tasks of %d done again, each once, none before it", len(handled), log.Len(0)+log.Len(1))
}
