package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// stallLimit is how long the demo waits for progress before it fails,
// saying why.
const stallLimit = 30 * time.Second

// fleet is the demo's worker processes: it starts them, kills one on the
// schedule, and tells the demo of any that exited on its own.
type fleet struct {
	self string
	env  []string

	mu    sync.Mutex
	procs map[*exec.Cmd]bool // running
	order []*exec.Cmd        // running, oldest first
	gone  []string           // exits the demo has not been told of
	last  string             // the last exit on its own, for a failure's reason
}

func newFleet(self string, env []string) *fleet {
	return &fleet{self: self, env: env, procs: map[*exec.Cmd]bool{}}
}

// start starts one more worker.
func (f *fleet) start() error { return f.startArgs() }

// startArgs starts one more worker with args (none for the demo's).
func (f *fleet) startArgs(args ...string) error {
	cmd := exec.Command(f.self, args...)
	cmd.Env = f.env
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting a worker: %w", err)
	}
	f.mu.Lock()
	f.procs[cmd] = true
	f.order = append(f.order, cmd)
	f.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.procs[cmd] { // not killed or stopped by the demo
			why := fmt.Sprintf("pid %d: %v", cmd.Process.Pid, err)
			if err == nil {
				why = fmt.Sprintf("pid %d: exit status 0", cmd.Process.Pid)
			}
			f.gone, f.last = append(f.gone, why), why
			f.forget(cmd)
		}
	}()
	return nil
}

// forget takes cmd off the running list; f.mu is held.
func (f *fleet) forget(cmd *exec.Cmd) {
	delete(f.procs, cmd)
	for i, c := range f.order {
		if c == cmd {
			f.order = append(f.order[:i], f.order[i+1:]...)
			break
		}
	}
}

// kill kills (-9) the i-th running worker (round robin): no drain, no
// checkpoint.
func (f *fleet) kill(i int) {
	f.mu.Lock()
	if len(f.order) == 0 {
		f.mu.Unlock()
		return
	}
	victim := f.order[i%len(f.order)]
	f.forget(victim)
	f.mu.Unlock()
	_ = victim.Process.Kill()
}

// exited returns the exits on their own since the last call.
func (f *fleet) exited() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.gone
	f.gone = nil
	return out
}

func (f *fleet) running() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.order)
}

// lastExit says the last exit on its own, for a failure's reason.
func (f *fleet) lastExit() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last == "" {
		return "no worker exited on its own"
	}
	return "the last worker to exit on its own: " + f.last
}

// stopAll signals every running worker and waits up to 10 s for them.
func (f *fleet) stopAll(sig syscall.Signal) {
	f.mu.Lock()
	procs := f.order
	f.order, f.procs = nil, map[*exec.Cmd]bool{}
	f.mu.Unlock()
	for _, p := range procs {
		_ = p.Process.Signal(sig)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range procs {
		// Gone once it can no longer be signalled (its Wait, in start's
		// goroutine, has reaped it).
		for time.Now().Before(deadline) && p.Process.Signal(syscall.Signal(0)) == nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// schemaMark is the comment the demo puts on the schema it creates: a
// schema of that name without it is someone else's, and refused.
const schemaMark = "created by nandi examples/payments: the demo drops and creates its tables here"

// ownSchema creates the demo's schema, or checks that the one of that
// name is the demo's own.
func ownSchema(ctx context.Context, url, schema string) error {
	pool, err := connect(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	var comment *string
	err = pool.QueryRow(ctx, `SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = $1`, schema).Scan(&comment)
	switch {
	case err == pgx.ErrNoRows:
		if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return fmt.Errorf("creating the schema %s: %w", schema, err)
		}
		_, err = pool.Exec(ctx, "COMMENT ON SCHEMA "+pgx.Identifier{schema}.Sanitize()+" IS '"+schemaMark+"'")
		return err
	case err != nil:
		return err
	case comment == nil || *comment != schemaMark:
		return fmt.Errorf("a schema %s exists and the demo did not create it: it writes nothing there; give another with -schema", schema)
	}
	return nil
}
