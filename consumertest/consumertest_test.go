package consumertest_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/consumertest"
	"github.com/nandi-go/nandi/transport"
)

// store is a handler's database: the effect of each task, and per key the
// newest token that wrote.
type store struct {
	mu      sync.Mutex
	applied map[string]int   // payload -> times its effect landed
	fence   map[string]int64 // key -> newest token
}

func newStore() *store { return &store{applied: map[string]int{}, fence: map[string]int64{}} }

func (s *store) count(_ context.Context, m *transport.Message) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied[string(m.Payload)], nil
}

// A handler that records each task as done with its effect, under its
// term's token, passes every case.
func TestAFencedIdempotentHandlerPasses(t *testing.T) {
	s := newStore()
	h := func(ctx context.Context, m *transport.Message) error {
		a, _ := consumer.AssignmentFromContext(ctx)
		s.mu.Lock() // one transaction: the check and the effect
		defer s.mu.Unlock()
		if a.Token < s.fence[m.Key] || s.applied[string(m.Payload)] > 0 {
			return nil // fenced, or done before
		}
		s.fence[m.Key] = a.Token
		s.applied[string(m.Payload)]++
		return nil
	}
	r := consumertest.Check(t, h, consumertest.Options{Applied: s.count})
	if len(r.Results) != 7*3 {
		t.Errorf("%d results; want 7 cases of 3 tasks", len(r.Results))
	}
}

// A handler that applies its effect at every call fails every case that
// delivers a task twice, and only those.
func TestANaiveHandlerFails(t *testing.T) {
	s := newStore()
	h := func(ctx context.Context, m *transport.Message) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.applied[string(m.Payload)]++
		return nil
	}
	r, err := consumertest.Run(context.Background(), h, consumertest.Options{Applied: s.count})
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, x := range r.Results {
		if !x.OK() && !slices.Contains(failed, x.Case) {
			failed = append(failed, x.Case)
		}
	}
	want := []string{"duplicate delivery", "redo after a handover", "cut at the deadline", "retry after an error", "late former holder", "overlap"}
	if !slices.Equal(failed, want) {
		t.Errorf("the naive handler failed %q; want %q", failed, want)
	}
	for _, f := range r.Failures()[:2] {
		t.Log(f)
	}
	if !strings.Contains(r.Failures()[0], "applied 2 times") {
		t.Errorf("failure %q does not say how many times", r.Failures()[0])
	}
}

// Run needs a handler and a way to read its effects.
func TestAMissingOrNilHandlerIsRefused(t *testing.T) {
	if _, err := consumertest.Run(context.Background(), nil, consumertest.Options{}); err == nil {
		t.Error("Run with no handler: no error")
	}
}
