package watermillfilter

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/drain"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/watermillsub"
)

// Options configure a Filter.
type Options struct {
	// KeyMetadata is the metadata key holding the task id (default "id"),
	// and Key, if set, returns the task key of a message instead: as for
	// a watermillsub.Source.
	KeyMetadata string
	Key         func(m *message.Message) (string, error)
	// MinTime is the least time a handler has before its lease can run
	// out: a message that arrives with less left waits for the renewal.
	// Default: the lease's Margin, Gap*Interval (as
	// consumer.Options.MinTaskTime).
	MinTime time.Duration
	// Logger receives trouble at Warn (overdue handlers) and Error
	// (panics); nil is silent.
	Logger *slog.Logger
}

// Filter is a router middleware that runs a handler only for the messages
// a lease owns, under the same rules as package consumer: the handler's
// context (message.Context) ends at the deadline of the lease it started
// under, as it stood when the handler started (a renewal meanwhile does
// not extend it; MinTime is the least it gets); no handler starts within
// MinTime of a deadline the renewal has not moved yet (it waits for the
// renewal, partition.Term.Room); when the term changes, handlers of the
// new term wait until those of the old one have returned (a drain, with
// drain.Gate), or until the old deadline has passed, after which those
// still running are overdue (counted, and logged); and a panic is
// recovered into a *consumer.PanicError that the middleware returns (the
// router's retry or poison middleware then decide). Run the lease
// yourself (lease.Run).
type Filter struct {
	lease *partition.Lease
	key   watermillsub.Options
	min   time.Duration
	log   *slog.Logger

	mu  sync.Mutex
	cur *filterTerm

	handled, failed, notOwned, unheld, panics, overdue atomic.Int64
}

// filterTerm is one term's handlers: the gate the drain waits on, and
// ready, closed once the term before it has drained.
type filterTerm struct {
	t     *partition.Term
	gate  drain.Gate
	ready chan struct{}
}

// New returns a Filter for lease. It does no I/O.
func New(lease *partition.Lease, opts Options) *Filter {
	if opts.MinTime <= 0 {
		opts.MinTime = lease.Margin()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Filter{lease: lease, key: watermillsub.Options{KeyMetadata: opts.KeyMetadata, Key: opts.Key}, min: opts.MinTime,
		log: opts.Logger.With("group", lease.Name())}
}

// Stats counts what a Filter did, since New.
type Stats struct {
	Handled  int64 // messages the handler handled (nil error)
	Failed   int64 // handler errors and panics returned to the router
	NotOwned int64 // acknowledged without handling: another index's
	Unheld   int64 // acknowledged and dropped: nothing was held when they came
	Panics   int64 // handler panics recovered
	Overdue  int64 // handlers still running when their term's deadline passed
	InFlight int64 // handlers running now
}

// Stats returns the counts so far (package metrics/watermillmetrics
// exports them).
func (f *Filter) Stats() Stats {
	s := Stats{Handled: f.handled.Load(), Failed: f.failed.Load(), NotOwned: f.notOwned.Load(),
		Unheld: f.unheld.Load(), Panics: f.panics.Load(), Overdue: f.overdue.Load()}
	f.mu.Lock()
	if f.cur != nil {
		s.InFlight = int64(f.cur.gate.InFlight())
	}
	f.mu.Unlock()
	return s
}

// Lease returns the lease the Filter follows.
func (f *Filter) Lease() *partition.Lease { return f.lease }

// Middleware runs h for the messages the lease owns, acknowledges the
// others without running it, and returns the key error of a message
// without a task id (marked consumer.Permanent: retrying cannot mend it).
func (f *Filter) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(m *message.Message) ([]*message.Message, error) {
		k, err := f.key.TaskKey(m)
		if err != nil {
			f.failed.Add(1)
			return nil, consumer.Permanent(err)
		}
		id := transport.TaskID(k)
		ft, t := f.enter(m.Context())
		if ft == nil {
			f.unheld.Add(1)
			return nil, nil
		}
		defer ft.gate.Leave()
		if !t.Assignment().Owns(id) {
			f.notOwned.Add(1)
			return nil, nil
		}
		ctx, cancel := context.WithDeadline(m.Context(), t.Deadline())
		defer cancel()
		m.SetContext(ctx)
		out, err := f.call(h, m)
		if err != nil {
			f.failed.Add(1)
		} else {
			f.handled.Add(1)
		}
		return out, err
	}
}

// enter admits a handler under the live term, once work may start in it
// (MinTime left before its deadline, and the previous term drained). It
// returns nil when nothing is held.
func (f *Filter) enter(ctx context.Context) (*filterTerm, *partition.Term) {
	for {
		t := f.lease.Term()
		if t == nil {
			return nil, nil
		}
		if t.Room(ctx, f.min) {
			ft, prev := f.termOf(t)
			if prev != nil {
				f.drain(prev)
				close(ft.ready)
			}
			<-ft.ready
			if ft.gate.Enter() {
				if t.Held() {
					return ft, t
				}
				ft.gate.Leave()
			}
		}
		select { // the term ended: wait for the next change of the lease
		case <-t.Done():
		case <-ctx.Done():
			return nil, nil
		}
	}
}

// termOf returns the filterTerm of t. When t is new it also returns the
// term before it, which the caller must drain and then close ready.
func (f *Filter) termOf(t *partition.Term) (ft, prev *filterTerm) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur != nil && f.cur.t == t {
		return f.cur, nil
	}
	prev = f.cur
	ft = &filterTerm{t: t, ready: make(chan struct{})}
	f.cur = ft
	if prev == nil {
		close(ft.ready)
		return ft, nil
	}
	prev.gate.Stop()
	return ft, prev
}

// drain waits for the handlers of a term that ended, until its deadline;
// those still running then are overdue.
func (f *Filter) drain(prev *filterTerm) {
	ctx, cancel := context.WithDeadline(context.Background(), prev.t.Deadline())
	defer cancel()
	if err := prev.gate.Wait(ctx); err != nil {
		n := prev.gate.InFlight()
		f.overdue.Add(int64(n))
		f.log.Warn("handlers overdue: still running at their term's deadline; the next holder may run their messages meanwhile", "count", n)
	}
}

// call runs the handler, recovering a panic.
func (f *Filter) call(h message.HandlerFunc, m *message.Message) (out []*message.Message, err error) {
	defer func() {
		if v := recover(); v != nil {
			f.panics.Add(1)
			pe := &consumer.PanicError{Func: "handler", Value: v, Stack: debug.Stack()}
			f.log.Error("handler panicked", "uuid", m.UUID, "panic", fmt.Sprint(v), "stack", string(pe.Stack))
			out, err = nil, pe
		}
	}()
	return h(m)
}
