package kafkatopic

import (
	"strings"
	"testing"

	"github.com/nandi-go/nandi/transport"
	"github.com/segmentio/kafka-go"
)

// FuzzMessage decodes Kafka messages: the key is the task id, or the
// message is reported (naming topic, partition and offset) and never
// dropped; the offset is the position; headers and value are kept.
func FuzzMessage(f *testing.F) {
	f.Add([]byte("42"), []byte("v"), "trace", []byte("abc"), 0, int64(0))
	f.Add([]byte{}, []byte{}, "", []byte{}, 2, int64(1<<40))
	f.Add([]byte("\xff\x00"), []byte(nil), "id", []byte("7"), -1, int64(-5))
	s := &Source{topic: "tasks"}
	f.Fuzz(func(t *testing.T, key, value []byte, hk string, hv []byte, partition int, offset int64) {
		m := &transport.Message{}
		s.message(m, kafka.Message{Topic: "tasks", Partition: partition, Offset: offset, Key: key, Value: value,
			Headers: []kafka.Header{{Key: hk, Value: hv}}})
		if m.Shard != partition || m.Position != transport.Offset(uint64(offset)) {
			t.Fatalf("shard %d position %v, want %d and offset %d", m.Shard, m.Position, partition, offset)
		}
		switch {
		case len(key) > 0 && (m.Err != nil || m.Key != string(key)):
			t.Fatalf("key %q: got key %q, err %v", key, m.Key, m.Err)
		case len(key) == 0 && (m.Err == nil || !strings.Contains(m.Err.Error(), "tasks/") || m.Key == ""):
			t.Fatalf("no key: got key %q, err %v; want an error naming the message and a key that spreads it", m.Key, m.Err)
		}
		if string(m.Payload) != string(value) || m.Headers[hk] != string(hv) {
			t.Fatalf("payload %q headers %v, want %q and %s=%q", m.Payload, m.Headers, value, hk, hv)
		}
	})
}
