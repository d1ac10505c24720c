package checkpoint

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

// Reset moves every index to the given positions in a new epoch with no
// history (nothing done before is skipped for it), says what it skips or
// redoes, changes nothing on a dry run, and is refused while a lease of
// the group may be held.
func TestResetMovesEveryIndexInANewEpoch(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(func(*redis.Options) {})
	ctx := context.Background()
	l := NewRedis(c, "reset")
	if _, err := l.Reset(ctx, []transport.Position{{}}, ResetOptions{Lease: c}); !errors.Is(err, ErrNoLedger) {
		t.Fatalf("Reset of a group with no ledger: %v; want ErrNoLedger", err)
	}
	origin := []transport.Position{{}, {}}
	for k := range 2 {
		if _, err := l.Open(ctx, OpenRequest{Replicas: 2, Index: k, Token: 10, Origin: origin}); err != nil {
			t.Fatal(err)
		}
	}
	marks := map[int]Mark{0: {Low: transport.Offset(40), High: transport.Offset(40)}, 1: {Low: transport.Offset(60), High: transport.Offset(70), Undone: []transport.Position{transport.Offset(65)}}}
	for k := range 2 {
		if err := l.Write(ctx, WriteRequest{Epoch: 1, Token: 10, Index: k, Replicas: 2, Marks: marks}); err != nil {
			t.Fatal(err)
		}
	}

	plan, err := l.Reset(ctx, []transport.Position{transport.Offset(50)}, ResetOptions{Lease: c, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	moves := strings.Join(plan.Moves(), "\n")
	t.Logf("dry run:\n%s", moves)
	if !strings.Contains(moves, "shard 0, index 0 of 2: skip from 40 to 50") || !strings.Contains(moves, "shard 1, index 1 of 2: redo from 50 to 60") {
		t.Errorf("the dry run's moves:\n%s", moves)
	}
	if st, _ := l.Read(ctx); st.Current.N != 1 || st.Current.At(0, 0) != transport.Offset(40) {
		t.Fatalf("a dry run changed the ledger: epoch %d, at %v", st.Current.N, st.Current.At(0, 0))
	}

	// A worker registering: refused.
	stop := register(t, c, "reset")
	if _, err := l.Reset(ctx, []transport.Position{{}}, ResetOptions{Lease: c}); !errors.Is(err, ErrGroupRunning) {
		t.Fatalf("Reset while a worker registers: %v; want ErrGroupRunning", err)
	} else {
		t.Log(err)
	}
	stop()
	time.Sleep(3 * 200 * time.Millisecond) // three intervals after the last registration

	r, err := l.Reset(ctx, []transport.Position{transport.Offset(50)}, ResetOptions{Lease: c})
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Current.N != 2 || r.N != 2 || len(st.History) != 1 || st.Current.ResetAt.IsZero() || st.Current.R != 2 {
		t.Fatalf("after the reset: epoch %d (reset said %d), %d in history, reset at %v, %d replicas; want epoch 2 alone, reset, of 2", st.Current.N, r.N, len(st.History), st.Current.ResetAt, st.Current.R)
	}
	for s := range 2 {
		for k := range 2 {
			if got := st.Current.At(s, k); got != transport.Offset(50) {
				t.Errorf("shard %d index %d at %v; want 50", s, k, got)
			}
		}
	}
	if prepared(st).Done(1, transport.Offset(55), 55) {
		t.Error("a task after the reset point is skipped as done before")
	}
	// Workers meet it at their next open, of their mapping or another.
	got, err := l.Open(ctx, OpenRequest{Replicas: 3, Index: 2, Token: 20, Origin: origin, Seen: 1, SeenStart: origin})
	if err != nil {
		t.Fatal(err)
	}
	if got.Current.N != 3 || got.From(2)[0] != transport.Offset(50) || got.From(2)[1] != transport.Offset(50) {
		t.Errorf("a new mapping after the reset: epoch %d from %v; want epoch 3 from 50", got.Current.N, got.From(2))
	}
}

// With the ledger on another Redis than the lease (consumer.Options.
// Checkpoints), the ledger's Redis has no lease of the group even while it
// runs: Reset does not take that for a stopped group (before, it reset a
// running group). It refuses (ErrLeaseUnknown) unless told where the
// lease is, and then checks it there.
func TestResetOfALedgerBesideNoLeaseChecksTheLeaseWhereItIs(t *testing.T) {
	leaseSrv, ledgerSrv := redistest.Start(t), redistest.Start(t)
	lc, c := leaseSrv.Client(), ledgerSrv.Client()
	ctx := context.Background()
	l := NewRedis(c, "apart")
	origin := []transport.Position{{}}
	if _, err := l.Open(ctx, OpenRequest{Replicas: 1, Token: 10, Origin: origin}); err != nil {
		t.Fatal(err)
	}
	stop := register(t, lc, "apart")
	if _, err := l.Reset(ctx, origin, ResetOptions{}); !errors.Is(err, ErrLeaseUnknown) {
		t.Fatalf("Reset with the lease elsewhere and not said: %v; want ErrLeaseUnknown", err)
	} else if !strings.Contains(err.Error(), "ResetOptions.Lease") {
		t.Errorf("the error does not say what to do: %v", err)
	}
	if _, err := l.Reset(ctx, origin, ResetOptions{DryRun: true}); !errors.Is(err, ErrLeaseUnknown) {
		t.Fatalf("a dry run with the lease elsewhere and not said: %v; want ErrLeaseUnknown", err)
	}
	if _, err := l.Reset(ctx, origin, ResetOptions{Lease: lc}); !errors.Is(err, ErrGroupRunning) {
		t.Fatalf("Reset told where the running group's lease is: %v; want ErrGroupRunning", err)
	}
	if st, _ := l.Read(ctx); st.Current.N != 1 {
		t.Fatalf("a refused reset changed the ledger: epoch %d", st.Current.N)
	}
	stop()
	time.Sleep(3 * 200 * time.Millisecond)
	r, err := l.Reset(ctx, origin, ResetOptions{Lease: lc})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := l.Read(ctx); st.Current.N != 2 || r.N != 2 {
		t.Fatalf("after the reset: epoch %d; want 2", st.Current.N)
	}
}

// register runs a worker of group's lease on c until stop returns, once
// it has registered.
func register(t *testing.T, c redis.UniversalClient, group string) (stop func()) {
	t.Helper()
	ctx := context.Background()
	lease, err := partition.New(c, partition.Options{Name: group, Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = lease.Run(lctx) }()
	redistest.WaitFor(t, 10*time.Second, "the worker to register", func() bool {
		g, err := partition.ReadGroup(ctx, c, group)
		return err == nil && len(g.Counts) > 0
	})
	return func() { cancel(); <-done }
}
