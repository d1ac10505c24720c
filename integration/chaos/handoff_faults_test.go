package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nandi-go/nandi/internal/natstest"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Process faults during a fenced handoff, on each log: a worker joins a
// settled group of 3, and the moment it takes its provisional term (the
// old holders are draining to release their shares) one process is hit:
// an old owner killed -9 or stopped (SIGSTOP for two intervals) mid-drain,
// the new owner killed -9 or stopped while provisional, or an old owner
// cut off from Redis and its log (its links hold every byte for four
// intervals; on Kafka its Redis only: a Kafka client reaches the broker
// its metadata names, past any proxy). Checked as every scenario here:
// never two holders, no task started without its lease, every task done,
// the group re-formed within 10 intervals, and every task that took
// effect twice announced by a worker's log. make chaos runs all 15;
// make test the first on Redis Streams.
func TestProcessFaultsDuringAFencedHandoff(t *testing.T) {
	type fault struct {
		name string
		n    int // workers at the end
		do   func(f *fleet, joiner int)
	}
	stop := func(id int) func(f *fleet, _ int) {
		return func(f *fleet, _ int) {
			f.signal(id, syscall.SIGSTOP)
			time.Sleep(2 * f.interval)
			f.signal(id, syscall.SIGCONT)
		}
	}
	faults := []fault{
		{"kill -9 an old owner mid-drain", 3, func(f *fleet, _ int) { f.kill(1) }},
		{"SIGSTOP an old owner mid-drain", 4, stop(1)},
		{"kill -9 the new owner while provisional", 3, func(f *fleet, j int) { f.kill(j) }},
		{"SIGSTOP the new owner while provisional", 4, func(f *fleet, j int) { stop(j)(f, j) }},
		{"an old owner partitioned mid-handoff", 4, func(f *fleet, _ int) {
			p := f.procs[1]
			p.proxy.Hold()
			if p.srcProxy != nil {
				p.srcProxy.Hold()
			}
			time.Sleep(4 * f.interval)
			p.proxy.Release()
			if p.srcProxy != nil {
				p.srcProxy.Release()
			}
		}},
	}
	for _, log := range []struct {
		name string
		use  func(f *fleet)
	}{
		{"redis-streams", func(*fleet) {}},
		{"jetstream", useJetStream},
		{"kafka-kfake", useKafka}, // a Kafka protocol peer, not a Kafka broker
	} {
		for i, ft := range faults {
			if chaosScale == 1 && (log.name != "redis-streams" || i != 0) {
				continue // make test runs one; make chaos all 15
			}
			t.Run(log.name+"/"+ft.name, func(t *testing.T) {
				f := newFleet(t, 300*time.Millisecond)
				f.work = 20 * time.Millisecond // so that the fault lands inside tasks
				log.use(f)
				ids, each := 200*chaosScale, 4
				for range 3 {
					f.start()
				}
				produced := f.produce(ids, each, 3*time.Second)
				time.Sleep(2 * time.Second)
				j := f.start()
				f.waitProvisional(j)
				ft.do(f, j)
				at := f.mark()
				<-produced
				h := f.finish(ids, each, false)
				f.reform(h, at, ft.n, 10*f.interval, ft.name)
				// Every task that took effect twice was announced by a
				// worker: the one whose handler overran, or the one that
				// took over from a holder that never released.
				list, err := f.sink.Client().LRange(context.Background(), "effects", 0, -1).Result()
				if err != nil {
					t.Fatal(err)
				}
				repeated, silent := f.unannounced(h, effects(list))
				// A task of a holder killed mid-drain that no one took
				// before a second change is announced when taken: the epoch
				// made from the one it never released carries that record
				// while the epoch it names is in the history
				// (TestOpenSaysWhatWasNotReleased).
				if len(silent) > 0 {
					t.Errorf("%d of %d tasks repeated with no worker announcing them, the first %v", len(silent), repeated, silent[:min(len(silent), 5)])
				}
				t.Logf("figures: %d tasks repeated, %d of them announced", repeated, repeated-len(silent))
			})
		}
	}
}

// waitProvisional waits until worker id records a provisional term: it
// joined at a change of the group, and the old holders are draining.
func (f *fleet) waitProvisional(id int) {
	f.t.Helper()
	path := filepath.Join(f.dir, fmt.Sprintf("worker-%d.jsonl", id))
	redistest.WaitFor(f.t, 20*time.Second, "worker "+strconv.Itoa(id)+"'s provisional term", func() bool {
		file, err := os.Open(path)
		if err != nil {
			return false
		}
		defer file.Close()
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			var r record
			if json.Unmarshal(sc.Bytes(), &r) == nil && r.Kind == "acq" && r.Prov {
				return true
			}
		}
		return false
	})
}

// useJetStream makes the fleet's log a JetStream stream on an embedded
// nats-server, each worker reaching it through a proxy of its own.
func useJetStream(f *fleet) {
	ns := natstest.Start(f.t)
	nc := ns.Conn()
	js, err := jetstream.New(nc)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: jsStream, Subjects: []string{jsSubject}}); err != nil {
		f.t.Fatal(err)
	}
	f.source, f.srcAddr = "jetstream", ns.Addr().String()
	f.publish = func(x, s int) {
		m := nats.NewMsg(jsSubject)
		m.Header.Set("id", strconv.Itoa(x))
		m.Data = []byte(strconv.Itoa(s))
		if err := nc.PublishMsg(m); err != nil { // JetStream stores core publishes in order
			f.t.Error(err)
		}
	}
}

// useKafka makes the fleet's log a topic of 4 partitions on kfake,
// written by kafka-go in order per key.
func useKafka(f *fleet) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, kafkaTopic))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(kc.Close)
	addrs := kc.ListenAddrs()
	tr := &kafka.Transport{}
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: kafkaTopic, Balancer: &kafka.Hash{}, Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	f.t.Cleanup(func() {
		_ = w.Close()
		tr.CloseIdleConnections()
	})
	f.source, f.srcAddr = "kafka", addrs[0]
	f.publish = func(x, s int) {
		if err := w.WriteMessages(context.Background(), kafka.Message{Key: []byte(strconv.Itoa(x)), Value: []byte(strconv.Itoa(s))}); err != nil {
			f.t.Error(err)
		}
	}
}
