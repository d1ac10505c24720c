package redisstream_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nandi-go/nandi/transport/transporttest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var streams atomic.Int64

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	transporttest.Run(t, transporttest.Harness{New: func(t *testing.T) (transport.Source, func(string, []byte)) {
		name := fmt.Sprintf("stream-%d", streams.Add(1))
		src, err := redisstream.New(c, name, redisstream.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return src, func(k string, p []byte) {
			if err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: name, Values: []any{"id", k, "payload", p}}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}})
}

func fetchOne(t *testing.T, src *redisstream.Source) *transport.Message {
	t.Helper()
	r, err := src.Open(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ms, err := r.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ms[0]
}

func TestEntryWithoutItsIDFieldCarriesAnErrorNamingIt(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	id, _ := c.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []any{"payload", "hi", "trace", "abc"}}).Result()
	src, _ := redisstream.New(c, "s", redisstream.Options{})
	m := fetchOne(t, src)
	if m.Err == nil || !strings.Contains(m.Err.Error(), id) || !strings.Contains(m.Err.Error(), `"id"`) {
		t.Fatalf("Err = %v; want an error naming entry %s and the field", m.Err, id)
	}
	if string(m.Payload) != "hi" || m.Headers["trace"] != "abc" {
		t.Fatalf("payload %q headers %v; want hi and trace=abc", m.Payload, m.Headers)
	}
	src2, _ := redisstream.New(c, "s", redisstream.Options{Key: func(id string, v map[string]any) (string, error) { return fmt.Sprint(v["trace"]), nil }})
	if m := fetchOne(t, src2); m.Err != nil || m.Key != "abc" {
		t.Fatalf("with a Key function: key %q err %v; want abc, nil", m.Key, m.Err)
	}
}

func TestTrimDropsOnlyWhatIsBelow(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	var ids []string
	for i := range 10 {
		id, _ := c.XAdd(ctx, &redis.XAddArgs{Stream: "t", Values: []any{"id", i}}).Result()
		ids = append(ids, id)
	}
	keep, _ := transport.ParsePosition(ids[6])
	off, _ := redisstream.New(c, "t", redisstream.Options{})
	_ = off.Trim(ctx, 0, keep)
	if n := c.XLen(ctx, "t").Val(); n != 10 {
		t.Fatalf("Trim without Options.Trim removed entries: %d left", n)
	}
	on, _ := redisstream.New(c, "t", redisstream.Options{Trim: true})
	if err := on.Trim(ctx, 0, keep); err != nil {
		t.Fatal(err)
	}
	if n := c.XLen(ctx, "t").Val(); n != 4 {
		t.Fatalf("%d entries left; want the 4 from %s on", n, ids[6])
	}
}
