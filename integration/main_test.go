package integration

import (
	"testing"

	"github.com/nandi-go/nandi/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, redistest.IgnoreProxyLeaks()...)
}
