package redisstream

import (
	"strings"
	"testing"

	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

// FuzzMessage decodes stream entries: an entry ID that parses is its
// position, and a position prints back as the same ID; the task id comes
// from the key field or the entry is reported (naming it) and never
// dropped; an entry without the payload field is reported too, keeping its
// key; the payload field is the payload and every other field a header.
func FuzzMessage(f *testing.F) {
	f.Add("1700000000000-0", "id", "42", "payload", "hello", "trace", "abc")
	f.Add("0-1", "other", "x", "payload", "", "", "")
	f.Add("18446744073709551615-18446744073709551615", "id", "", "payload", "p", "id", "dup")
	f.Add("12-", "id", "1", "x", "y", "z", "w")
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	f.Cleanup(func() { _ = c.Close() })
	s, err := New(c, "tasks", Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, id, f1, v1, f2, v2, f3, v3 string) {
		values := map[string]any{f1: v1, f2: v2, f3: v3}
		m := &transport.Message{}
		err := s.message(m, redis.XMessage{ID: id, Values: values}, 0)
		p, perr := transport.ParsePosition(id)
		if (err == nil) != (perr == nil) {
			t.Fatalf("entry ID %q: message error %v, but parsing says %v", id, err, perr)
		}
		if err != nil {
			return
		}
		if m.Position != p {
			t.Fatalf("entry ID %q: position %v, want %v", id, m.Position, p)
		}
		if back, err := parseID(formatID(m.Position)); err != nil || back != m.Position {
			t.Fatalf("position %v prints as %q, which parses as %v, %v", m.Position, formatID(m.Position), back, err)
		}
		key, hasKey := values["id"]
		_, hasPayload := values["payload"]
		switch {
		case hasKey && !hasPayload && (m.Err == nil || !strings.Contains(m.Err.Error(), id) || m.Key != key):
			t.Fatalf("entry %q without a payload field: key %q, err %v; want its key and an error naming it", id, m.Key, m.Err)
		case hasKey && hasPayload && (m.Err != nil || m.Key != key):
			t.Fatalf("entry %q with id %q: key %q, err %v", id, key, m.Key, m.Err)
		case !hasKey && (m.Err == nil || !strings.Contains(m.Err.Error(), id) || m.Key != transport.FallbackKey("tasks/"+id)):
			t.Fatalf("entry %q without an id field: key %q, err %v; want an error naming it, and the fallback key of its place", id, m.Key, m.Err)
		}
		if pl, ok := values["payload"]; ok && string(m.Payload) != pl {
			t.Fatalf("payload %q, want %q", m.Payload, pl)
		}
		for f, v := range values {
			if f != "id" && f != "payload" && m.Headers[f] != v {
				t.Fatalf("header %q = %q, want %q", f, m.Headers[f], v)
			}
		}
	})
}
