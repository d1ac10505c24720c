package consumertest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
)

// Options configure Run.
type Options struct {
	// Applied returns how many times the effect of task m was applied, as
	// the handler's store says (required).
	Applied func(ctx context.Context, m *transport.Message) (int, error)
	// Task returns task i (default: key "i", payload "task i"). Each case
	// uses tasks of its own; a task's position is i+1 in shard 0.
	Task func(i int) *transport.Message
	// PerCase is how many tasks each case runs (default 3).
	PerCase int
	// Cut is how long a call runs before its context ends in the case
	// "cut at the deadline" (default 20ms).
	Cut time.Duration
}

// Result is one case's outcome for one task.
type Result struct {
	Case    string             // the hard case the task went through
	Task    *transport.Message // the task
	Applied int                // times the effect landed, as Options.Applied said
	Err     error              // an error reading Applied
}

// OK reports whether the task's effect was applied exactly once.
func (r Result) OK() bool { return r.Err == nil && r.Applied == 1 }

// Report is every case's results.
type Report struct {
	Results []Result // one per task of every case, in the order they ran
}

// Failures describes each task whose effect was not applied exactly once.
func (r Report) Failures() []string {
	var out []string
	for _, x := range r.Results {
		switch {
		case x.Err != nil:
			out = append(out, fmt.Sprintf("%s: task %q: reading its effect: %v", x.Case, x.Task.Key, x.Err))
		case x.Applied != 1:
			out = append(out, fmt.Sprintf("%s: task %q applied %d times; want once", x.Case, x.Task.Key, x.Applied))
		}
	}
	return out
}

// Check runs h through every case and fails t with each task whose
// effect was not applied exactly once.
func Check(t testing.TB, h consumer.Handler, opts Options) Report {
	t.Helper()
	r, err := Run(context.Background(), h, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range r.Failures() {
		t.Error(f)
	}
	return r
}

// the terms of the cases: the former holder's and the next one's.
var (
	former = partition.Assignment{Index: 0, Replicas: 1, Token: 1_000}
	next   = partition.Assignment{Index: 0, Replicas: 1, Token: 2_000}
)

type step func(ctx context.Context, h consumer.Handler, m *transport.Message, cut time.Duration)

// call delivers m to h under term a. A panic is a failed attempt, as the
// consumer recovers it: what counts is what the store says.
func call(ctx context.Context, h consumer.Handler, a partition.Assignment, m *transport.Message) {
	defer func() { _ = recover() }()
	c := *m // each delivery is a message of its own, as a transport's are
	_ = h(consumer.ContextWithAssignment(ctx, a), &c)
}

var cases = []struct {
	name string
	run  step
}{
	{"once", func(ctx context.Context, h consumer.Handler, m *transport.Message, _ time.Duration) {
		call(ctx, h, next, m)
	}},
	{"duplicate delivery", func(ctx context.Context, h consumer.Handler, m *transport.Message, _ time.Duration) {
		call(ctx, h, next, m)
		call(ctx, h, next, m)
	}},
	{"redo after a handover", func(ctx context.Context, h consumer.Handler, m *transport.Message, _ time.Duration) {
		call(ctx, h, former, m)
		call(ctx, h, next, m)
	}},
	{"cut at the deadline", func(ctx context.Context, h consumer.Handler, m *transport.Message, cut time.Duration) {
		cctx, cancel := context.WithTimeout(ctx, cut)
		call(cctx, h, former, m)
		cancel()
		call(ctx, h, next, m)
	}},
	{"retry after an error", func(ctx context.Context, h consumer.Handler, m *transport.Message, _ time.Duration) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		call(cctx, h, next, m)
		call(ctx, h, next, m)
	}},
	{"late former holder", func(ctx context.Context, h consumer.Handler, m *transport.Message, _ time.Duration) {
		call(ctx, h, next, m)
		call(ctx, h, former, m)
	}},
	{"overlap", func(ctx context.Context, h consumer.Handler, m *transport.Message, _ time.Duration) {
		var wg sync.WaitGroup
		wg.Go(func() { call(ctx, h, former, m) })
		wg.Go(func() { call(ctx, h, next, m) })
		wg.Wait()
	}},
}

// Run calls h through every case and reports each task's effect. Only a
// missing handler or Options.Applied is an error: a case's outcome is in
// the Report. A handler's panic counts as a failed attempt.
func Run(ctx context.Context, h consumer.Handler, opts Options) (Report, error) {
	if h == nil || opts.Applied == nil {
		return Report{}, errors.New("consumertest: a handler and Options.Applied are required")
	}
	if opts.Task == nil {
		opts.Task = func(i int) *transport.Message {
			return &transport.Message{Key: strconv.Itoa(i), Payload: []byte("task " + strconv.Itoa(i))}
		}
	}
	if opts.PerCase <= 0 {
		opts.PerCase = 3
	}
	if opts.Cut <= 0 {
		opts.Cut = 20 * time.Millisecond
	}
	var r Report
	i := 0
	for _, c := range cases {
		for range opts.PerCase {
			m := opts.Task(i)
			m.Shard, m.Position = 0, transport.Offset(uint64(i)+1)
			i++
			c.run(ctx, h, m, opts.Cut)
			n, err := opts.Applied(ctx, m)
			r.Results = append(r.Results, Result{Case: c.name, Task: m, Applied: n, Err: err})
		}
	}
	return r, nil
}
