package redistest

import (
	"context"
	"testing"
	"time"
)

func TestSentinelsFailover(t *testing.T) {
	ss := StartSentinels(t, 1, 3)
	c := ss.Client()
	if err := c.Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old := ss.Master()
	start := time.Now()
	old.Kill()
	nm := ss.WaitFailover(old)
	t.Logf("failover to %s in %v", nm.Addr(), time.Since(start))
	WaitFor(t, 10*time.Second, "the client to follow", func() bool { return c.Set(context.Background(), "k2", "v", 0).Err() == nil })
	t.Logf("client follows after %v", time.Since(start))
}
