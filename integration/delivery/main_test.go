// Package delivery holds the end-to-end delivery tests: consumers over every
// transport, against real peers (redis-server, an embedded nats-server,
// kfake), while the group changes.
package delivery

import (
	"strings"
	"testing"

	"github.com/nandi-go/nandi/internal/faultproxy"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(faultproxy.IgnoreLeaks(),
		// watermill-redisstream's reader sleeps on after its Subscriber's
		// Close (BenchmarkWatermillFigures' baseline).
		goleak.IgnoreAnyFunction("github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream.(*Subscriber).read"))...)
}

func groupName(t *testing.T) string {
	return strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
}
