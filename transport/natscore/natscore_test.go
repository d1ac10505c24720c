package natscore_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nandi-go/nandi/internal/natstest"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/natscore"
	"github.com/nandi-go/nandi/transport/transporttest"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var subjects atomic.Int64

func publisher(t *testing.T, nc *nats.Conn, subject string) func(string, []byte) {
	return func(k string, p []byte) {
		m := nats.NewMsg(subject)
		m.Header.Set("id", k)
		m.Data = p
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConformance(t *testing.T) {
	srv := natstest.Start(t)
	sub, pub := srv.Conn(), srv.Conn()
	transporttest.Run(t, transporttest.Harness{New: func(t *testing.T) (transport.Source, func(string, []byte)) {
		subject := fmt.Sprintf("tasks.%d", subjects.Add(1))
		src, err := natscore.New(sub, subject, natscore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return src, publisher(t, pub, subject)
	}})
}

// A subject per shard (Options.Shards), published with SubjectFor.
func TestConformanceSharded(t *testing.T) {
	srv := natstest.Start(t)
	sub, pub := srv.Conn(), srv.Conn()
	transporttest.Run(t, transporttest.Harness{New: func(t *testing.T) (transport.Source, func(string, []byte)) {
		prefix := fmt.Sprintf("sharded.%d", subjects.Add(1))
		src, err := natscore.New(sub, prefix, natscore.Options{Shards: 4})
		if err != nil {
			t.Fatal(err)
		}
		return src, func(k string, p []byte) { publisher(t, pub, src.SubjectFor(k))(k, p) }
	}})
}

func TestMessageWithoutItsIDHeaderCarriesAnError(t *testing.T) {
	srv := natstest.Start(t)
	nc := srv.Conn()
	src, _ := natscore.New(nc, "plain", natscore.Options{})
	r, err := src.Open(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := nc.Publish("plain", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	ms, err := r.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ms[0].Err == nil || !strings.Contains(ms[0].Err.Error(), "plain") {
		t.Fatalf("Err = %v; want an error naming the subject", ms[0].Err)
	}
	if info, _ := src.Info(context.Background()); info.Log || !info.Lossy {
		t.Fatalf("Info = %+v; want a lossy source that is not a log", info)
	}
}
