package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
)

// readAll reads every entry of src's streams from their start.
func readAll(t *testing.T, src *redisstream.Source, want int) []*transport.Message {
	t.Helper()
	ctx := context.Background()
	info, err := src.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := src.Open(ctx, make([]transport.Position, info.Shards))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []*transport.Message
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < want && time.Now().Before(deadline) {
		ms, err := r.Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ms...)
	}
	return got
}

// What a Producer writes, the Source it came from reads where the group
// expects it: each key in its aligned shard (or its legacy one on
// unaligned streams), in order per key, with its payload and headers, and
// the trace context the Inject hook adds.
func TestProducerWritesWhereTheSourceReads(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	for _, unaligned := range []bool{false, true} {
		t.Run(fmt.Sprintf("unaligned=%v", unaligned), func(t *testing.T) {
			names := redisstream.Names(fmt.Sprintf("out-%v", unaligned), 12)
			src, err := redisstream.NewSharded(c, names, redisstream.Options{Unaligned: unaligned})
			if err != nil {
				t.Fatal(err)
			}
			p, err := src.Producer(redisstream.ProducerOptions{Inject: func(_ context.Context, h map[string]string) { h["traceparent"] = "00-trace" }})
			if err != nil {
				t.Fatal(err)
			}
			const keys, each = 50, 4
			for seq := range each {
				var batch []transport.Message
				for k := range keys {
					key := "user-" + strconv.Itoa(k)
					if k%2 == 0 {
						key = strconv.Itoa(k) // decimal keys are their own task id
					}
					batch = append(batch, transport.Message{Key: key, Payload: []byte(key + "/" + strconv.Itoa(seq)), Headers: map[string]string{"tenant": "t" + strconv.Itoa(k)}})
				}
				if seq == 0 { // one at a time too
					for _, r := range batch {
						if err := p.Publish(ctx, r.Key, r.Payload, r.Headers); err != nil {
							t.Fatal(err)
						}
					}
					continue
				}
				ps, err := p.PublishBatch(ctx, batch)
				if err != nil || len(ps) != len(batch) {
					t.Fatalf("PublishBatch: %d positions, %v", len(ps), err)
				}
			}
			got := readAll(t, src, keys*each)
			if len(got) != keys*each {
				t.Fatalf("read %d entries; want %d", len(got), keys*each)
			}
			next := map[string]int{}
			for _, m := range got {
				want := redisstream.Shard(m.Key, 12)
				if unaligned {
					want = redisstream.LegacyShard(m.Key, 12)
				}
				if m.Shard != want {
					t.Errorf("key %q in shard %d; want %d", m.Key, m.Shard, want)
				}
				if unaligned == false && transport.TaskID(m.Key)%12 != uint64(m.Shard) {
					t.Errorf("key %q (task id %d) in shard %d of an aligned source", m.Key, transport.TaskID(m.Key), m.Shard)
				}
				if want := m.Key + "/" + strconv.Itoa(next[m.Key]); string(m.Payload) != want {
					t.Errorf("payload %q; want %q (per-key order)", m.Payload, want)
				}
				next[m.Key]++
				if m.Headers["traceparent"] != "00-trace" || m.Headers["tenant"] == "" || len(m.Headers) != 2 {
					t.Errorf("headers %v; want tenant and traceparent", m.Headers)
				}
			}
		})
	}
}

// A task the consumer could not take, or headers that would be read as
// its key or payload, are refused before anything is written.
func TestProducerRefusesWhatTheConsumerWouldNotRead(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	src, err := redisstream.NewSharded(c, redisstream.Names("refuse", 4), redisstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := src.Producer(redisstream.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, batch := range [][]transport.Message{
		{{Key: "a"}, {Key: ""}},
		{{Key: "a"}, {Key: "b", Headers: map[string]string{"id": "c"}}},
		{{Key: "a"}, {Key: "b", Headers: map[string]string{"payload": "c"}}},
	} {
		_, err := p.PublishBatch(ctx, batch)
		if !errors.Is(err, transport.ErrInvalidTask) {
			t.Errorf("PublishBatch(%v) = %v; want a refusal", batch, err)
		} else {
			t.Log(err)
		}
	}
	for _, s := range redisstream.Names("refuse", 4) {
		if n := c.XLen(ctx, s).Val(); n != 0 {
			t.Errorf("%s holds %d entries after refused batches; want none written", s, n)
		}
	}
	custom, err := redisstream.NewSharded(c, redisstream.Names("custom", 2), redisstream.Options{
		Key: func(id string, values map[string]any) (string, error) { return id, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := custom.Producer(redisstream.ProducerOptions{}); err == nil {
		t.Error("a Producer for a Source with a custom Key: no error")
	}
}
