package kafkatopic_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/kafkatopic"
)

// kcatProduce writes key:value lines with kcat (librdkafka) and its
// extra arguments.
func kcatProduce(t *testing.T, addrs []string, topic, lines string, args ...string) {
	t.Helper()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatal("no kcat on PATH: this test runs docs/transports.md's kcat recipe (apt-get install -y kcat; .ci/run does)")
	}
	cmd := exec.Command(kcat, append([]string{"-P", "-b", strings.Join(addrs, ","), "-t", topic, "-K:"}, args...)...)
	cmd.Stdin = strings.NewReader(lines)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat: %v\n%s", err, out)
	}
}

// docs/transports.md's kcat recipe places a decimal key where an aligned
// read expects it (-p $((key % partitions))), and librdkafka's own fnv1a
// partitioner does not: the docs say so with this count.
func TestKcatRecipeAndLibrdkafkaFNV1a(t *testing.T) {
	const parts, n = 12, 500
	addrs := cluster(t, 1, parts, "recipe")
	var lines strings.Builder // every key, for librdkafka's partitioner
	for i := range n {
		fmt.Fprintf(&lines, "%d:v\n", 1000+i*7)
	}
	// the recipe: -p $((key % 12)), one kcat call per partition here
	byPart := map[int]*strings.Builder{}
	for i := range n {
		k := 1000 + i*7
		if byPart[k%parts] == nil {
			byPart[k%parts] = &strings.Builder{}
		}
		fmt.Fprintf(byPart[k%parts], "%d:v\n", k)
	}
	for p, b := range byPart {
		kcatProduce(t, addrs, "recipe", b.String(), "-p", fmt.Sprint(p))
	}
	misplaced := func(addrs []string, topic string) int {
		src, err := kafkatopic.New(addrs, topic, kafkatopic.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		r, err := src.Open(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		seen, bad := 0, 0
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for seen < n {
			ms, err := r.Fetch(ctx)
			if err != nil {
				t.Fatalf("%s: %d of %d read: %v", topic, seen, n, err)
			}
			for _, m := range ms {
				seen++
				if transport.TaskID(m.Key)%parts != uint64(m.Shard) {
					bad++
				}
			}
		}
		return bad
	}
	if bad := misplaced(addrs, "recipe"); bad != 0 {
		t.Errorf("%d of %d records written by the recipe are not in partition TaskID(key) %% %d", bad, n, parts)
	}
	addrs2 := cluster(t, 1, parts, "fnv1a")
	kcatProduce(t, addrs2, "fnv1a", lines.String(), "-X", "partitioner=fnv1a")
	bad := misplaced(addrs2, "fnv1a")
	t.Logf("figures: librdkafka's fnv1a partitioner put %d of %d keys in nandi's partition (TaskID %% %d)", n-bad, n, parts)
	if bad == 0 {
		t.Errorf("librdkafka's fnv1a placed every key as nandi does; docs/transports.md says it does not")
	}
}
