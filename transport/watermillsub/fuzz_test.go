package watermillsub

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
)

// FuzzMessage decodes Watermill messages: the id metadata is the task id,
// or the message is reported (naming its UUID), never dropped.
func FuzzMessage(f *testing.F) {
	f.Add("uuid-1", "id", "42", []byte("p"))
	f.Add("", "ID", "", []byte{})
	s := &Source{topic: "tasks"}
	f.Fuzz(func(t *testing.T, uuid, mk, mv string, payload []byte) {
		wm := message.NewMessage(uuid, payload)
		wm.Metadata.Set(mk, mv)
		m := s.message(wm)
		want := wm.Metadata.Get("id")
		switch {
		case want != "" && (m.Err != nil || m.Key != want):
			t.Fatalf("metadata id=%q: key %q, err %v", want, m.Key, m.Err)
		case want == "" && m.Err == nil:
			t.Fatalf("no id metadata: no error; want the message reported")
		}
		if string(m.Payload) != string(payload) {
			t.Fatalf("payload %q, want %q", m.Payload, payload)
		}
	})
}
