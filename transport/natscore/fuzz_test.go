package natscore

import (
	"testing"

	"github.com/nandi-go/nandi/transport"
	"github.com/nats-io/nats.go"
)

// FuzzMessage decodes core NATS messages: the id header is the task id, or
// the message is reported with an error naming the header, never dropped;
// data and headers are kept.
func FuzzMessage(f *testing.F) {
	f.Add("id", "42", []byte("payload"))
	f.Add("Id", "", []byte{})
	f.Add("trace", "x", []byte(nil))
	s := &Source{subject: "tasks", opts: Options{KeyHeader: "id"}}
	f.Fuzz(func(t *testing.T, hk, hv string, data []byte) {
		h := nats.Header{}
		h[hk] = []string{hv}
		m := &transport.Message{}
		s.message(m, &nats.Msg{Subject: "tasks", Header: h, Data: data})
		want := h.Get("id")
		switch {
		case want != "" && (m.Err != nil || m.Key != want):
			t.Fatalf("header id=%q: key %q, err %v", want, m.Key, m.Err)
		case want == "" && m.Err == nil:
			t.Fatalf("no id header (%q=%q): no error; want the message reported", hk, hv)
		}
		if string(m.Payload) != string(data) || (hk != "id" && m.Headers[hk] != h.Get(hk)) {
			t.Fatalf("payload %q headers %v", m.Payload, m.Headers)
		}
	})
}
