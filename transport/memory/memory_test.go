package memory

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/transporttest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func readN(t *testing.T, r transport.Reader, n int) []*transport.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []*transport.Message
	for len(out) < n {
		ms, err := r.Fetch(ctx)
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", len(out), n, err)
		}
		out = append(out, ms...)
	}
	return out
}

func TestEveryReaderSeesEveryMessageInOrderPerShard(t *testing.T) {
	l := NewLog(4)
	src := l.Source()
	a, _ := src.Open(context.Background(), nil)
	b, _ := src.Open(context.Background(), nil)
	defer a.Close()
	defer b.Close()
	want := map[string]bool{}
	for i := range 1000 {
		k := fmt.Sprint(i % 37)
		l.Append(k, []byte(fmt.Sprint(i)))
		want[fmt.Sprint(i)] = true
	}
	for _, r := range []transport.Reader{a, b} {
		got := readN(t, r, 1000)
		last := map[int]int64{}
		seen := map[string]bool{}
		for _, m := range got {
			if p, ok := last[m.Shard]; ok && int64(m.Position.Lo) != p+1 {
				t.Fatalf("shard %d: position %v after %d", m.Shard, m.Position, p)
			}
			last[m.Shard] = int64(m.Position.Lo)
			seen[string(m.Payload)] = true
		}
		if len(seen) != len(want) {
			t.Fatalf("a reader saw %d distinct messages; want %d", len(seen), len(want))
		}
	}
}

func TestOpenReadsEachShardFromItsPosition(t *testing.T) {
	l := NewLog(2)
	for i := range 100 {
		l.Append(fmt.Sprint(i), nil)
	}
	from := []transport.Position{transport.Offset(uint64(l.Len(0) - 3)), transport.Offset(uint64(l.Len(1)))}
	r, _ := l.Source().Open(context.Background(), from)
	defer r.Close()
	got := readN(t, r, 3)
	for _, m := range got {
		if m.Shard != 0 || m.Position.Lo < from[0].Lo {
			t.Fatalf("got shard %d position %v; want shard 0 from %v", m.Shard, m.Position, from[0])
		}
	}
	info, _ := l.Source().Info(context.Background())
	if !info.Log || info.Shards != 2 || info.Ends[0] != transport.Offset(uint64(l.Len(0))) {
		t.Fatalf("Info = %+v", info)
	}
}

func TestFetchReturnsPromptlyWhenItsContextEndsOrTheReaderCloses(t *testing.T) {
	l := NewLog(1)
	r, _ := l.Source().Open(context.Background(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := r.Fetch(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Fetch on an empty log = %v; want the context's error", err)
	}
	go func() {
		time.Sleep(10 * time.Millisecond)
		r.Close()
	}()
	if _, err := r.Fetch(context.Background()); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Fetch on a closed reader = %v; want ErrClosed", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestAppendCopiesThePayload(t *testing.T) {
	l := NewLog(1)
	p := []byte("hello")
	l.Append("1", p)
	p[0] = 'j'
	r, _ := l.Source().Open(context.Background(), nil)
	defer r.Close()
	if got := string(readN(t, r, 1)[0].Payload); got != "hello" {
		t.Fatalf("payload %q; want the bytes as appended", got)
	}
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, transporttest.Harness{New: func(t *testing.T) (transport.Source, func(string, []byte)) {
		l := NewLog(3)
		return l.Source(), func(k string, p []byte) { l.Append(k, p) }
	}})
}

func TestConformanceAligned(t *testing.T) {
	transporttest.Run(t, transporttest.Harness{New: func(t *testing.T) (transport.Source, func(string, []byte)) {
		l := NewAlignedLog(6)
		return l.Source(), func(k string, p []byte) { l.Append(k, p) }
	}})
}
