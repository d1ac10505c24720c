package pgsink_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/sink/pgsink"
	"github.com/nandi-go/nandi/transport/memory"
)

// runConsumer runs one consumer of group over log with the sink's handler
// until every account of n has reached want, then stops it cleanly.
func runConsumer(t *testing.T, rs *redistest.Server, group string, log *memory.Log, s *pgsink.Sink, table string, until func() bool) {
	t.Helper()
	l, err := partition.New(rs.Client(), partition.Options{Name: group, Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(l, log.Source(), s.Handler(credit(table)), consumer.Options{Concurrency: 8, CheckpointInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	redistest.WaitFor(t, 30*time.Second, "the consumer's work", until)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The Redis ledger is lost after the sink has forgotten its records below
// the group's watermark (which it keeps in PostgreSQL): a new worker, with
// no memory of the ledger, reads the log from its start again, and every
// task is refused as already done; no balance moves.
func TestLostLedgerRedoesNothing(t *testing.T) {
	rs := redistest.Start(t)
	p := pool(t, server(t).URL())
	const n = 300
	accounts(t, p, "acc3", n)
	log := memory.NewLog(2)
	// The tasks arrive over 3 seconds, in 10 bursts: the sink forgets as
	// batches run (at most every ForgetEvery, 250ms, which may be no less
	// than BatchTimeout), so a log handled in one go on a quiet machine
	// would leave nothing forgotten before the ledger is lost, and the
	// test would not test what it says.
	appended := make(chan struct{})
	go func() {
		defer close(appended)
		for i := range n {
			log.Append(strconv.Itoa(i), nil)
			if (i+1)%(n/10) == 0 {
				time.Sleep(300 * time.Millisecond)
			}
		}
	}()
	defer func() { <-appended }()
	const group = "lostledger"
	ledger := checkpoint.NewRedis(rs.Client(), group)
	s, err := pgsink.New(context.Background(), p, pgsink.Options{Group: group, Checkpoints: ledger, ForgetEvery: 250 * time.Millisecond, BatchTimeout: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, rs, group, log, s, "acc3", func() bool { return s.Stats().Applied == n && s.Stats().Forgotten > 0 })
	forgotten := s.Stats().Forgotten
	if err := rs.Client().Del(context.Background(), checkpoint.Key(group)).Err(); err != nil {
		t.Fatal(err)
	}
	s2, err := pgsink.New(context.Background(), p, pgsink.Options{Group: group})
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, rs, group, log, s2, "acc3", func() bool { return s2.Stats().AlreadyDone == n })
	for i := range n {
		if b := balance(t, p, "acc3", i); b != 1 {
			t.Fatalf("account %d: balance %d after the redo; want 1", i, b)
		}
	}
	if st := s2.Stats(); st.Applied != 0 || st.AlreadyDone != n {
		t.Errorf("the redo's stats %+v; want nothing applied, %d already done", st, n)
	}
	t.Logf("figures: %d tasks, %d records forgotten below the watermark before the ledger was lost, all %d refused as already done after", n, forgotten, n)
}
