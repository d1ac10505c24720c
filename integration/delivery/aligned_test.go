package delivery

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
)

// throughSizes is the scenario of issue 22 on an aligned source of 12
// shards: messages published while the group goes 3 -> 5 -> 2 -> 4
// workers by clean starts and stops (sizes that divide 12 and one that
// does not); then every message must have been handled exactly once, in
// order per id, only by its owner at that moment. Each worker reads only
// the shards its lease can own ids in.
func throughSizes(f *fleet, publish publisher) {
	t := f.t
	ids, each := 3000, 8
	f.ids = ids
	f.live = map[int]*member{}
	f.copt = consumer.Options{Concurrency: 8, CheckpointInterval: 50 * time.Millisecond}
	f.work = func() { time.Sleep(time.Duration(rand.Int64N(int64(2 * time.Millisecond)))) }
	for range 3 {
		f.start()
	}
	produced := produce(ids, each, 10*time.Millisecond, publish) // about 2.4 seconds in all
	resize := func(n int) {
		for len(f.live) < n {
			f.start()
		}
		var ids []int
		for id := range f.live {
			ids = append(ids, id)
		}
		sort.Ints(ids)
		for len(f.live) > n {
			f.stop(ids[0])
			ids = ids[1:]
		}
	}
	for _, n := range []int{5, 2, 4} {
		time.Sleep(1500 * time.Millisecond)
		resize(n)
	}
	<-produced
	deadline := time.Now().Add(60 * time.Second)
	for f.handled() < ids*each && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // anything handled twice shows up now
	// Each worker holding a share reads exactly the shards it can own ids
	// in. A worker whose term has just begun reads nothing until it has
	// opened the log (Kafka's metadata and readers take a while), so the
	// group is given until a deadline to be seen settled, and a mismatch
	// left then fails.
	deadline = time.Now().Add(10 * time.Second)
	for {
		mismatch := ""
		for _, m := range f.live {
			a, ok := m.c.Lease().Current()
			if got := m.c.Reading(); ok && fmt.Sprint(got) != fmt.Sprint(a.ShardsOf(12)) {
				mismatch = fmt.Sprintf("%d of %d reads shards %v; want %v", a.Index, a.Replicas, got, a.ShardsOf(12))
			}
		}
		if mismatch == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Error(mismatch)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.stopAll()
	f.check(ids, each)
}

func TestAlignedMemoryLogThroughGroupSizes(t *testing.T) {
	throughSizes(alignedMemoryLog(t, 12))
}

func TestAlignedRedisStreamsThroughGroupSizes(t *testing.T) {
	throughSizes(alignedRedisStreams(t, 12))
}

// Kafka through kfake (a Kafka protocol peer): 12 partitions written with
// kafkatopic.Balancer.
func TestAlignedKafkaThroughGroupSizes(t *testing.T) {
	throughSizes(alignedKafkaTopic(t, 12))
}

// JetStream: a subject per shard (outbox.0 .. outbox.11).
func TestAlignedJetStreamThroughGroupSizes(t *testing.T) {
	throughSizes(alignedJetStream(t, 12))
}
