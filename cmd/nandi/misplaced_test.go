package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/redistest"
)

// nandi status says that a group's aligned source was found misplaced
// (here the subscriptions' record, consumer.MisalignedKey, as a worker
// writes it), in both forms; and nothing of it once cleared.
func TestStatusShowsMisplaced(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	url := "redis://" + s.Addr()
	m := consumer.Misalignment{Since: time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC), Destination: "tasks.0", Shard: 0, Key: "6003", BelongsTo: 3}
	b, _ := json.Marshal(m)
	if err := s.Client().Set(ctx, consumer.MisalignedKey("mis"), b, 0).Err(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := nandi(t, ctx, "status", "-redis", url, "-group", "mis")
	if code != 0 || !strings.Contains(out, "misplaced") || !strings.Contains(out, "key 6003 in tasks.0 (shard 0; its id belongs to shard 3)") {
		t.Fatalf("status: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = nandi(t, ctx, "status", "-redis", url, "-group", "mis", "-json")
	var st Status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || !strings.Contains(st.Misplaced, "6003") {
		t.Fatalf("status -json: exit %d, misplaced %q\n%s", code, st.Misplaced, out)
	}
	if _, err := consumer.ClearMisaligned(ctx, s.Client(), "mis"); err != nil {
		t.Fatal(err)
	}
	if _, out, _ = nandi(t, ctx, "status", "-redis", url, "-group", "mis"); strings.Contains(out, "misplaced") {
		t.Fatalf("status after the clear still says misplaced:\n%s", out)
	}
}
