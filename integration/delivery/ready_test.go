package delivery

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/faultproxy"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
	"github.com/redis/go-redis/v9"
)

// With the fenced handoff, a worker drains its share at a change of the
// group only once every share is ready to hand over: when one worker is
// stopped (its link to Redis held: it neither renews nor says it is
// ready), the others serve their shares to their caps instead of handing
// them to successors that cannot start. Each of their old terms ends at
// its cap, not an interval before it.
func TestAStoppedWorkerLeavesTheOthersServingToTheirCaps(t *testing.T) {
	srv := redistest.Start(t)
	log := memory.NewAlignedLog(4)
	iv := 200 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var leases []*partition.Lease
	var links []*faultproxy.Proxy
	start := func() {
		link := faultproxy.New(t, srv.Addr())
		client := redis.NewClient(&redis.Options{Addr: link.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = client.Close() })
		l, err := partition.New(client, partition.Options{Name: groupName(t), Interval: iv})
		if err != nil {
			t.Fatal(err)
		}
		c, err := consumer.New(l, log.Source(), func(context.Context, *transport.Message) error { return nil }, consumer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		leases, links = append(leases, l), append(links, link)
		wg.Go(func() { _ = c.Run(ctx) })
	}
	settled := func(n int) func() bool {
		return func() bool {
			for _, l := range leases {
				tm := l.Term()
				if a, ok := l.Current(); !ok || a.Replicas != n || tm == nil || tm.Provisional() {
					return false
				}
			}
			return true
		}
	}
	// A change first: the group's first epoch fences nothing.
	start()
	start()
	redistest.WaitFor(t, 10*time.Second, "a group of 2", settled(2))
	start()
	redistest.WaitFor(t, 10*time.Second, "a group of 3", settled(3))
	time.Sleep(2 * iv)
	olds := []*partition.Term{leases[1].Term(), leases[2].Term()}
	links[0].Hold()
	defer links[0].Release()
	for i, tm := range olds {
		select {
		case <-tm.Done():
		case <-time.After(4 * iv):
			t.Fatalf("worker %d's term of 3 did not end within 4 intervals of the stop", i+1)
		}
		ended, capAt := time.Now(), tm.Deadline()
		if !tm.HandingOver() {
			t.Fatalf("worker %d's term ended with %v without being handed over", i+1, tm.Err())
		}
		// Released early, it would end about an interval before its cap.
		if early := capAt.Sub(ended); early > iv/4 {
			t.Errorf("worker %d's term of 3 ended %v before its cap: handed over though the stopped worker was never ready", i+1, early.Round(time.Millisecond))
		}
	}
}
