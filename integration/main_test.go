package integration

import (
	"testing"

	"github.com/nandi-go/nandi/internal/faultproxy"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, faultproxy.IgnoreLeaks()...)
}
