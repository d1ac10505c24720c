package natsjs

import (
	"errors"
	"testing"

	"github.com/nandi-go/nandi/transport"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// fakeMsg is a jetstream.Msg with data, headers and a stream sequence.
type fakeMsg struct {
	jetstream.Msg
	data []byte
	h    nats.Header
	seq  uint64
	bad  bool // Metadata fails
}

func (m fakeMsg) Data() []byte         { return m.data }
func (m fakeMsg) Headers() nats.Header { return m.h }
func (m fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	if m.bad {
		return nil, errors.New("no metadata")
	}
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: m.seq}}, nil
}

// FuzzMessage decodes JetStream messages: the stream sequence is the
// position, the id header the task id, and a message without one is
// reported, never dropped.
func FuzzMessage(f *testing.F) {
	f.Add("id", "42", []byte("payload"), uint64(1), false)
	f.Add("other", "x", []byte{}, uint64(0), true)
	s := &Source{stream: "TASKS", opts: Options{KeyHeader: "id"}}
	f.Fuzz(func(t *testing.T, hk, hv string, data []byte, seq uint64, bad bool) {
		h := nats.Header{}
		h[hk] = []string{hv}
		m := s.message(fakeMsg{data: data, h: h, seq: seq, bad: bad})
		if !bad && m.Position != transport.Offset(seq) {
			t.Fatalf("position %v, want sequence %d", m.Position, seq)
		}
		want := h.Get("id")
		switch {
		case want != "" && (m.Err != nil || m.Key != want):
			t.Fatalf("header id=%q: key %q, err %v", want, m.Key, m.Err)
		case want == "" && (m.Err == nil || m.Key == ""):
			t.Fatalf("no id header: key %q, err %v; want the message reported", m.Key, m.Err)
		}
		if string(m.Payload) != string(data) {
			t.Fatalf("payload %q, want %q", m.Payload, data)
		}
	})
}
