// Package chaos proves the guarantees with worker processes, not
// goroutines: the test binary re-runs itself as a worker (a consumer, its
// lease, and a handler that records its effects in a fencing sink), so a
// test can SIGTERM, SIGSTOP/SIGCONT and kill -9 one. Each worker reaches
// Redis through its own in-process toxiproxy, and records, on the host's
// monotonic clock (shared by every process of one machine), when it held
// which (index, replicas, token) and every task it started and finished. A
// checker reads every record and reports each violation with the records
// that prove it.
package chaos

import (
	"os"
	"testing"

	"github.com/nandi-go/nandi/internal/faultproxy"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(envWorker) != "" {
		os.Exit(workerMain())
	}
	goleak.VerifyTestMain(m, faultproxy.IgnoreLeaks()...)
}
