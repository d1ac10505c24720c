package delivery

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
)

// throughChurn is the scenario of a group that changes while it hands
// over: 15,000 messages (3,000 ids, each five times in sequence) published
// over about 4 seconds while a group of 3 goes through seven changes a
// little over an interval apart (joins and clean leaves, each change
// landing in the handover of the one before), half the leavers serving
// their share to its cap (ServeToCap) and half draining at once. Then
// every message must have been handled exactly once, in order per id,
// only by its owner at that moment, never two of an id at once; and the
// fenced handoff must have served some of the terms (the later changes).
// A task handled twice passes only if a worker announced it (a handler
// that overran its lease on a busy machine; check).
func throughChurn(f *fleet, publish publisher) {
	throughChurnEvery(f, publish, func() time.Duration { return f.opts.Interval * 13 / 10 }, true)
}

// throughChurnEvery is throughChurn with the time between changes drawn
// from gap, and fenced saying whether the fenced handoff is on (off: the
// lease's timing alone, as before it).
func throughChurnEvery(f *fleet, publish publisher, gap func() time.Duration, fenced bool) {
	const ids, each = 3000, 5
	f.live = map[int]*member{}
	f.copt = consumer.Options{Concurrency: 4, CheckpointInterval: 50 * time.Millisecond, NoFencedHandoff: !fenced}
	f.serveToCap = func(id int) bool { return id%2 == 0 }
	f.work = func() { time.Sleep(time.Duration(rand.Int64N(int64(time.Millisecond)))) }
	for range 3 {
		f.start()
	}
	produced := produce(ids, each, 25*time.Millisecond, publish) // about 4 seconds in all
	time.Sleep(3 * f.opts.Interval)
	var leaving []chan struct{}
	leave := func() {
		var id int
		for x := range f.live {
			if id == 0 || x < id {
				id = x // the oldest: it holds a share
			}
		}
		m := f.live[id]
		delete(f.live, id)
		done := make(chan struct{})
		leaving = append(leaving, done)
		go func() {
			defer close(done)
			m.cancel()
			if err := <-m.done; err != nil {
				f.t.Errorf("worker %d: Run = %v", id, err)
			}
			f.fenced.Add(m.c.Stats().FencedHandoffs)
		}()
	}
	for _, change := range []string{"join", "leave", "join", "join", "leave", "leave", "join"} {
		if change == "join" {
			f.start()
		} else {
			leave()
		}
		time.Sleep(gap())
	}
	<-produced
	for _, done := range leaving {
		<-done
	}
	f.finish(ids, each)
	// The group's first epoch does not know who serves it, so its first
	// change goes by the lease's timing; the later ones are fenced.
	if fenced && f.fenced.Load() == 0 {
		f.t.Error("no term was served from a provisional lease: the fenced handoff never ran")
	}
	f.t.Logf("terms served from a provisional lease: %d", f.fenced.Load())
}

func TestExactlyOnceThroughChurn(t *testing.T) {
	for _, log := range []struct {
		name string
		open func(*testing.T, int) (*fleet, publisher)
	}{
		{"memory", alignedMemoryLog},
		{"redis-streams", alignedRedisStreams},
		{"kafka-kfake", alignedKafkaTopic}, // a Kafka protocol peer, not a Kafka broker
		{"jetstream", alignedJetStream},
	} {
		t.Run(log.name, func(t *testing.T) { throughChurn(log.open(t, 4)) })
	}
}

// Joins and leaves every 0.4 to 1.3 intervals, each change landing
// anywhere in the one before's handover, with the fenced handoff on and
// off, on a Redis stream and the memory log (each lease on a real
// redis-server). Under load (make test-loaded) an unannounced duplicate
// was once seen this way.
func TestExactlyOnceThroughFastChurn(t *testing.T) {
	for _, fenced := range []bool{true, false} {
		for _, log := range []struct {
			name string
			open func(*testing.T, int) (*fleet, publisher)
		}{
			{"memory", alignedMemoryLog},
			{"redis-streams", alignedRedisStreams},
		} {
			name := log.name + "/fence-off"
			if fenced {
				name = log.name + "/fence-on"
			}
			t.Run(name, func(t *testing.T) {
				f, publish := log.open(t, 4)
				gap := func() time.Duration {
					return f.opts.Interval*4/10 + time.Duration(rand.Int64N(int64(f.opts.Interval*9/10)))
				}
				throughChurnEvery(f, publish, gap, fenced)
			})
		}
	}
}
