package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/internal/natstest"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/nandi-go/nandi/transport/natsjs"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// kedaMetricsAPI is KEDA's metrics-api trigger as KEDA runs it
// (pkg/scalers/metrics_api_scaler.go): GET the url, anything but 200 is an
// error, the number at valueLocation (a GJSON path; here a plain field) is
// the metric; the scaler is active when it is above activationTargetValue,
// and the HPA it drives (metricType AverageValue) wants ceil(value /
// targetValue) replicas.
type kedaMetricsAPI struct {
	url, valueLocation        string
	targetValue, activationTV float64
}

func (k kedaMetricsAPI) value() (float64, error) {
	resp, err := http.Get(k.url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("api returned %d: %s", resp.StatusCode, body)
	}
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		return 0, err
	}
	v, ok := doc[k.valueLocation].(float64)
	if !ok {
		return 0, fmt.Errorf("valueLocation %q is not a number in %s", k.valueLocation, body)
	}
	return v, nil
}

// isActive and desired are KEDA's IsActive and the HPA's rule.
func (k kedaMetricsAPI) isActive() (bool, error) {
	v, err := k.value()
	return v > k.activationTV, err
}

func (k kedaMetricsAPI) desired() (int, error) {
	v, err := k.value()
	return int(math.Ceil(v / k.targetValue)), err
}

// scaledLog is a log of three aligned shards, a source over it for
// workers, a producer, and where each key lands.
type scaledLog struct {
	name    string
	src     func() transport.Source
	publish func(key string)
	shardOf func(key string) int
	logs    *logs
}

const scaledShards = 3

func scaledRedis(t *testing.T, c redis.UniversalClient) scaledLog {
	names := []string{"jobs.0", "jobs.1", "jobs.2"}
	src, err := redisstream.NewSharded(c, names, redisstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return scaledLog{name: "redis-streams", src: func() transport.Source { return src },
		publish: func(k string) {
			_, err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: src.StreamFor(k), Values: []any{"id", k, "payload", "x"}}).Result()
			if err != nil {
				t.Error(err)
			}
		},
		shardOf: func(k string) int { return redisstream.Shard(k, scaledShards) },
		logs:    &logs{redis: c}}
}

func scaledKafka(t *testing.T) scaledLog {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(scaledShards, "jobs"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	addrs := kc.ListenAddrs()
	tr := &kafka.Transport{}
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: "jobs", Balancer: kafkatopic.Balancer{}, Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	t.Cleanup(func() { _ = w.Close(); tr.CloseIdleConnections() })
	return scaledLog{name: "kafka-kfake",
		src: func() transport.Source {
			src, err := kafkatopic.New(addrs, "jobs", kafkatopic.Options{Aligned: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = src.Close() })
			return src
		},
		publish: func(k string) {
			if err := w.WriteMessages(context.Background(), kafka.Message{Key: []byte(k), Value: []byte("x")}); err != nil {
				t.Error(err)
			}
		},
		shardOf: func(k string) int { return int(transport.TaskID(k) % scaledShards) },
		logs:    &logs{kafka: addrs}}
}

func scaledJetStream(t *testing.T) scaledLog {
	ns := natstest.Start(t)
	js, err := jetstream.New(ns.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.*"}}); err != nil {
		t.Fatal(err)
	}
	src, err := natsjs.New(js, "JOBS", natsjs.Options{Shards: scaledShards, SubjectPrefix: "jobs"})
	if err != nil {
		t.Fatal(err)
	}
	nc := ns.Conn()
	l := &logs{natsURL: ns.ClientURL()}
	t.Cleanup(l.close)
	return scaledLog{name: "jetstream", src: func() transport.Source { return src },
		publish: func(k string) {
			m := nats.NewMsg(src.SubjectFor(k))
			m.Header.Set("id", k)
			m.Data = []byte("x")
			if _, err := js.PublishMsg(context.Background(), m); err != nil {
				t.Error(err)
			}
			_ = nc
		},
		shardOf: func(k string) int { return int(transport.TaskID(k) % scaledShards) },
		logs:    l}
}

// group runs n workers of group over src; each task waits for release
// (closed: none waits).
func runScaledGroup(t *testing.T, c redis.UniversalClient, group string, n int, src func() transport.Source, release <-chan struct{}) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		l, err := partition.New(c, partition.Options{Name: group, Interval: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		cs, err := consumer.New(l, src(), func(ctx context.Context, m *transport.Message) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, consumer.Options{CheckpointInterval: 50 * time.Millisecond, Concurrency: 4})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = cs.Run(ctx) })
	}
	return func() { cancel(); wg.Wait() }
}

// The scaler's lag equals, shard by shard, the entries published after
// the group finished what it had, on Redis Streams, Kafka (kfake) and
// JetStream: with every worker stopped (and KEDA, through the metrics-api
// contract, goes from inactive at zero to active on the first entry),
// with the group running but not finishing, and back at zero once it
// finishes.
func TestScalerCountsTheBacklogOfEveryLog(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	defer c.Close()
	for i, mk := range []func() scaledLog{
		func() scaledLog { return scaledRedis(t, c) },
		func() scaledLog { return scaledKafka(t) },
		func() scaledLog { return scaledJetStream(t) },
	} {
		lg := mk()
		t.Run(lg.name, func(t *testing.T) {
			group := fmt.Sprintf("scaled-%d", i)
			s := &scaler{lease: c, logs: lg.logs, every: 0, log: slog.New(slog.DiscardHandler), readings: map[string]*reading{}}
			hs := httptest.NewServer(s.handler())
			defer hs.Close()
			keda := kedaMetricsAPI{url: hs.URL + "/keda/" + group, valueLocation: "entries", targetValue: 10}
			if _, err := keda.value(); err == nil || !strings.Contains(err.Error(), "404") {
				t.Fatalf("a group no worker ever ran: %v; want KEDA to see an error (404), so that the ScaledObject's fallback starts one", err)
			}
			if n := len(s.readings); n != 0 {
				t.Errorf("the scaler keeps %d readings of names no group has; want none (any name can be asked for)", n)
			}
			// A group that ran and finished everything, then stopped.
			done := make(chan struct{})
			close(done)
			stop := runScaledGroup(t, c, group, 2, lg.src, done)
			for k := range 20 {
				lg.publish("a" + strconv.Itoa(k))
			}
			waitBacklog(t, s, group, "the first 20 done", func(b *Backlog) bool { return b.Entries == 0 })
			stop()
			if active, err := keda.isActive(); err != nil || active {
				t.Fatalf("IsActive with no backlog and no worker: %v, %v; want false", active, err)
			}
			// With no worker, the first entry makes it active.
			lg.publish("first")
			want := make([]int64, scaledShards)
			want[lg.shardOf("first")]++
			if active, err := keda.isActive(); err != nil || !active {
				t.Fatalf("IsActive after the first entry with no worker: %v, %v; want true", active, err)
			}
			for k := range 24 {
				key := "b" + strconv.Itoa(k)
				lg.publish(key)
				want[lg.shardOf(key)]++
			}
			checkShards(t, s, group, "every worker stopped", want)
			if n, err := keda.desired(); err != nil || n != 3 {
				t.Errorf("the replicas KEDA's HPA wants for 25 entries at a target of 10: %d, %v; want 3", n, err)
			}
			// Running, but finishing nothing: the lag stays what is there.
			release := make(chan struct{})
			stop = runScaledGroup(t, c, group, 2, lg.src, release)
			defer stop()
			for k := range 9 {
				key := "c" + strconv.Itoa(k)
				lg.publish(key)
				want[lg.shardOf(key)]++
			}
			checkShards(t, s, group, "the group running, its handlers blocked", want)
			close(release)
			waitBacklog(t, s, group, "all done", func(b *Backlog) bool { return b.Entries == 0 })
			if active, err := keda.isActive(); err != nil || active {
				t.Fatalf("IsActive once all is done: %v, %v; want false", active, err)
			}
			// Prometheus gets the same, once per group.
			resp, err := http.Get(hs.URL + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, line := range []string{
				fmt.Sprintf(`nandi_group_backlog_entries{group=%q} 0`, group),
				fmt.Sprintf(`nandi_group_lag_entries{group=%q,shard="2",source=`, group),
				fmt.Sprintf(`nandi_group_backlog_read_ok{group=%q} 1`, group),
			} {
				if strings.Count(string(body), line) != 1 {
					t.Errorf("/metrics has %q %d times; want once:\n%s", line, strings.Count(string(body), line), body)
				}
			}
		})
	}
}

func waitBacklog(t *testing.T, s *scaler, group, what string, ok func(*Backlog) bool) {
	t.Helper()
	var last *Backlog
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if last, err = s.backlog(context.Background(), group); err == nil && ok(last) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: the backlog is %+v (%v)", what, last, err)
}

func checkShards(t *testing.T, s *scaler, group, when string, want []int64) {
	t.Helper()
	b, err := s.backlog(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]int64, len(b.Shards))
	var sum int64
	for i, sh := range b.Shards {
		got[i] = sh.Entries
		sum += sh.Entries
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || sum != b.Entries {
		t.Fatalf("%s: the backlog per shard is %v (total %d); counted, %v", when, got, b.Entries, want)
	}
}
