package natsjs_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/nandi-go/nandi/internal/natstest"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/natsjs"
	"github.com/nandi-go/nandi/transport/transporttest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var streams atomic.Int64

func TestConformance(t *testing.T) {
	srv := natstest.Start(t)
	js, err := jetstream.New(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	transporttest.Run(t, transporttest.Harness{New: func(t *testing.T) (transport.Source, func(string, []byte)) {
		n := streams.Add(1)
		name, subject := fmt.Sprintf("S%d", n), fmt.Sprintf("s%d.tasks", n)
		if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: []string{subject}}); err != nil {
			t.Fatal(err)
		}
		src, err := natsjs.New(js, name, natsjs.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return src, func(k string, p []byte) {
			m := nats.NewMsg(subject)
			m.Header.Set("id", k)
			m.Data = p
			if _, err := js.PublishMsg(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		}
	}})
}

// A subject per shard (Options.Shards), published with SubjectFor.
func TestConformanceSharded(t *testing.T) {
	srv := natstest.Start(t)
	js, err := jetstream.New(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	transporttest.Run(t, transporttest.Harness{New: func(t *testing.T) (transport.Source, func(string, []byte)) {
		n := streams.Add(1)
		name, prefix := fmt.Sprintf("SH%d", n), fmt.Sprintf("sh%d.tasks", n)
		if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".*"}}); err != nil {
			t.Fatal(err)
		}
		src, err := natsjs.New(js, name, natsjs.Options{Shards: 4, SubjectPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return src, func(k string, p []byte) {
			m := nats.NewMsg(src.SubjectFor(k))
			m.Header.Set("id", k)
			m.Data = p
			if _, err := js.PublishMsg(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		}
	}})
}
