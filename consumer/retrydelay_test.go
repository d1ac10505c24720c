package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/memory"
)

// Options.RetryDelay decides the wait between attempts: it is called once
// per failed attempt with the attempt's number and error, in order; a
// panic in it is recovered, counted, and the default backoff used.
func TestRetryDelayIsAskedForEveryRetry(t *testing.T) {
	forEachConcurrency(t, func(t *testing.T, conc int) {
		log := memory.NewLog(1)
		var mu sync.Mutex
		var asked []string
		var calls atomic.Int64
		h := func(ctx context.Context, m *transport.Message) error {
			if n := calls.Add(1); n <= 4 {
				return fmt.Errorf("failure %d", n)
			}
			return nil
		}
		opts := consumer.Options{
			Concurrency: conc,
			RetryMin:    time.Hour, // the default backoff would never retry within the test
			RetryDelay: func(attempt int, err error) time.Duration {
				mu.Lock()
				asked = append(asked, fmt.Sprintf("%d:%v", attempt, err))
				mu.Unlock()
				if attempt == 3 {
					panic("RetryDelay is broken")
				}
				return -time.Second // negative: retry at once
			},
		}
		opts.RetryMax = opts.RetryMin
		c, _ := consumer.New(lease(t, server(t).Client()), log.Source(), h, opts)
		stop := run(t, c)
		log.Append("1", nil)
		waitFor(t, "3 failures seen", func() bool { return c.Stats().Failed >= 3 })
		// The third failure's RetryDelay panicked: the default backoff
		// (an hour) applies, so the task is still waiting.
		time.Sleep(50 * time.Millisecond)
		st := c.Stats()
		stop()
		mu.Lock()
		defer mu.Unlock()
		want := []string{"1:failure 1", "2:failure 2", "3:failure 3"}
		if fmt.Sprint(asked) != fmt.Sprint(want) {
			t.Errorf("RetryDelay asked %v; want %v", asked, want)
		}
		if st.Failed != 3 || st.Handled != 0 || st.Panics != 1 {
			t.Errorf("%d failed, %d handled, %d panics; want 3, 0, 1 (the default backoff after RetryDelay panicked)", st.Failed, st.Handled, st.Panics)
		}
	})
}

type traceKey struct{}

// recorder keeps the context of every log record at Warn or above.
type recorder struct {
	mu   sync.Mutex
	ctxs map[string][]context.Context
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(ctx context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ctxs[rec.Message] = append(r.ctxs[rec.Message], ctx)
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// What a handler gives SetTaskContext (its span's context, with package
// tracing) is the context OnErrorContext gets and the "task failing" line
// is logged with, so that a slog handler bridging to OpenTelemetry puts
// the failure in the task's trace; without it, both get the term's context
// (with the assignment). A message the handler never saw is reported with
// the term's context, not the last handler call's.
func TestFailuresAreReportedInTheTaskContext(t *testing.T) {
	forEachConcurrency(t, func(t *testing.T, conc int) {
		log := memory.NewLog(1)
		rec := &recorder{ctxs: map[string][]context.Context{}}
		var mu sync.Mutex
		got := map[string]context.Context{}
		h := func(ctx context.Context, m *transport.Message) error {
			if m.Key == "2" {
				return errors.New("no trace for this one")
			}
			consumer.SetTaskContext(context.WithValue(ctx, traceKey{}, "trace of "+m.Key))
			return errors.New("failing")
		}
		opts := consumer.Options{
			Concurrency: conc, MaxAttempts: 1, Logger: slog.New(rec),
			DeadLetter: func(context.Context, *transport.Message, error) error { return nil },
			OnErrorContext: func(ctx context.Context, m *transport.Message, attempt int, err error) {
				mu.Lock()
				got[m.Key] = ctx
				mu.Unlock()
			},
		}
		c, _ := consumer.New(lease(t, server(t).Client()), log.Source(), h, opts)
		stop := run(t, c)
		log.Append("1", nil)
		waitFor(t, "task 1 dead-lettered", func() bool { return c.Stats().DeadLetters == 1 })
		log.Append("2", nil)
		waitFor(t, "task 2 dead-lettered", func() bool { return c.Stats().DeadLetters == 2 })
		stop()
		mu.Lock()
		defer mu.Unlock()
		if v := got["1"].Value(traceKey{}); v != "trace of 1" {
			t.Errorf("OnErrorContext's context for task 1 carries %v; want what its handler gave SetTaskContext", v)
		}
		if v := got["2"].Value(traceKey{}); v != nil {
			t.Errorf("OnErrorContext's context for task 2 carries %v, another call's; want the term's", v)
		}
		for _, k := range []string{"1", "2"} {
			if _, ok := consumer.AssignmentFromContext(got[k]); !ok {
				t.Errorf("OnErrorContext's context for task %s has no assignment", k)
			}
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		failing := rec.ctxs["task failing"]
		if len(failing) == 0 || failing[0].Value(traceKey{}) != "trace of 1" {
			t.Errorf("\"task failing\" logged with %v; want task 1's context", failing)
		}
	})
}
