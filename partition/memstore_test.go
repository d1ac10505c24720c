package partition

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// link is one worker's way to the store, with faults. Delays and hangs
// ignore ctx, as a go-redis client without ContextTimeoutEnabled does.
type link struct {
	s        *memStore
	iv, ppm  int64
	mu       sync.Mutex
	reqDelay time.Duration
	repDelay time.Duration
	jitter   time.Duration                  // each request is delayed by a further [0, jitter)
	jitterFn func(*rand.Rand) time.Duration // or by this, when set
	rnd      *rand.Rand
	hold     chan struct{} // non-nil: calls block until it is closed
	drop     bool          // the store runs the call, the reply is lost
	down     bool          // calls fail at once
	// delayFirst delays the worker's first call by that much more (its
	// retries are not delayed): a first attempt that reaches the store
	// after its retry was answered.
	delayFirst time.Duration
	calls      int
}

func (k *link) set(f func(k *link)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	f(k)
}

func (k *link) register(ctx context.Context, c call) (reply, error) {
	k.mu.Lock()
	req, rep, hold, drop, down := k.reqDelay, k.repDelay, k.hold, k.drop, k.down
	if k.calls++; k.calls == 1 {
		req += k.delayFirst
	}
	if k.jitter > 0 {
		req += time.Duration(k.rnd.Int64N(int64(k.jitter)))
	}
	if k.jitterFn != nil {
		req += k.jitterFn(k.rnd)
	}
	k.mu.Unlock()
	if down {
		return reply{}, fmt.Errorf("memstore: connection refused")
	}
	if hold != nil {
		<-hold
	}
	time.Sleep(req)
	r, err := k.s.exec(k.iv, k.ppm, c)
	time.Sleep(rep)
	if drop {
		return reply{}, errDropped
	}
	return r, err
}
