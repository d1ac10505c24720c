// Package layers holds the test that keeps nandi's packages in layers that
// never reach back up.
package layers

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/nandi-go/nandi"

// rank is each package's layer: a package imports only packages of a
// lower layer. The transports sit with the lease, below the checkpoint
// ledger and the consumer; what builds on the consumer sits above it.
var rank = map[string]int{
	"hist": 0, "drain": 0, "transport": 0, "internal/leasecheck": 0, "internal/backoff": 0, "internal/diagrams": 0, "internal/diagrams/cmd/gen": 1, "internal/docs": 6,
	"partition": 1, "transport/memory": 1, "transport/redisstream": 1, "transport/natsjs": 1,
	"transport/natscore": 1, "transport/kafkatopic": 1, "transport/watermillsub": 1, "transport/transporttest": 1,
	"internal/redistest": 1, "internal/faultproxy": 1, "internal/natstest": 1, "internal/pgtest": 0, "internal/spintest": 0,
	"partition/model": 1, "checkpoint/model": 2,
	"checkpoint": 2, "checkpoint/memledger": 3, "presence": 2, "internal/deadstream": 2,
	"consumer": 3,
	"tracing":  4, "metrics": 4, "consumertest": 4, "deadletter": 4, "deadletter/jsdead": 5, "deadletter/kafkadead": 5, "health": 4, "watermillfilter": 4, "watermillpubsub": 4,
	"metrics/watermillmetrics": 5,
	"cmd/nandi":                6, "examples": 6, "examples/kafka-shared-topic": 6, "examples/mail-sender": 6,
	"examples/nats-filter": 6, "examples/watermill-router": 6, "examples/watermill-filter": 6, "examples/dead-letters": 6, "examples/quickstart": 6, "examples/internal/demoredis": 1,
	"integration": 6, "integration/chaos": 6, "integration/delivery": 6, "integration/transports": 6,
	"internal/layers": 6,
}

func goList(t *testing.T, args ...string) []string {
	return goListIn(t, "", args...)
}

// goListIn runs go list in dir (a module of its own, as examples/).
func goListIn(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v in %q: %v", args, dir, err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// Every package imports (outside its tests) only packages of a lower
// layer: no transport imports the consumer, the drain or anything above
// the lease, and nothing imports what is built on it.
func TestLayersPointDown(t *testing.T) {
	lines := goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...")
	// examples/ is a module of its own, in the same layers.
	lines = append(lines, goListIn(t, "../../examples", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")...)
	for _, line := range lines {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/")
		r, ok := rank[pkg]
		if !ok {
			t.Errorf("package %s has no layer: add it to rank in internal/layers", pkg)
			continue
		}
		for _, imp := range f[1:] {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(imp, module+"/")
			if rank[dep] >= r {
				t.Errorf("%s (layer %d) imports %s (layer %d): a layer reaching up or sideways", pkg, r, dep, rank[dep])
			}
		}
	}
}

// Importing package metrics never pulls Watermill into a build, and no
// transport pulls the consumer.
func TestDependencies(t *testing.T) {
	for _, dep := range goList(t, "-deps", module+"/metrics") {
		if strings.Contains(dep, "ThreeDotsLabs/watermill") {
			t.Errorf("package metrics depends on %s", dep)
		}
	}
	for _, dep := range goList(t, "-deps", module+"/transport/...") {
		for _, above := range []string{"/consumer", "/drain", "/checkpoint", "/presence", "/metrics"} {
			if dep == module+above {
				t.Errorf("a package under transport/ depends on %s", dep)
			}
		}
	}
}
