package watermillpubsub

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/transport"
)

// Marshaller writes a message as a Redis stream entry's fields: the
// method set of watermill-redisstream's Marshaller, so that its
// DefaultMarshallerUnmarshaller (or your own) fits PublisherConfig as it
// is, without this package importing watermill-redisstream.
type Marshaller interface {
	Marshal(topic string, msg *message.Message) (map[string]any, error)
}

// Unmarshaller reads a message back from an entry's fields: the method set
// of watermill-redisstream's Unmarshaller.
type Unmarshaller interface {
	Unmarshal(values map[string]any) (*message.Message, error)
}

// RedisStreamKey is a redisstream.Options.Key for a topic that
// watermill-redisstream's publishers write too (a fleet moving over one
// service at a time): an entry's id field when it has one (this package's
// Publisher writes it), else its message UUID (watermill-redisstream
// writes no key). An entry with neither is an error, which the
// subscription's failure policy gets.
func RedisStreamKey(id string, values map[string]any) (string, error) {
	for _, f := range []string{"id", UUIDHeader} {
		switch v := values[f].(type) {
		case string:
			if v != "" {
				return v, nil
			}
		case []byte:
			if len(v) > 0 {
				return string(v), nil
			}
		}
	}
	return "", fmt.Errorf("watermillpubsub: entry %s has neither an id field nor a %s field", id, UUIDHeader)
}

// unmarshal is the message of a task read with u: the entry's fields as
// the log kept them (its headers, and its payload under "payload", as
// watermill-redisstream names it). A message u cannot read is a permanent
// failure: retrying reads the same bytes.
func unmarshal(u Unmarshaller, m *transport.Message) (*message.Message, error) {
	values := make(map[string]any, len(m.Headers)+1)
	for k, v := range m.Headers {
		values[k] = v
	}
	values["payload"] = string(m.Payload)
	msg, err := u.Unmarshal(values)
	if err != nil {
		return nil, consumer.Permanent(fmt.Errorf("watermillpubsub: the Unmarshaller cannot read the message with key %s: %w", m.Key, err))
	}
	if msg == nil {
		return nil, consumer.Permanent(fmt.Errorf("watermillpubsub: the Unmarshaller returned no message for key %s", m.Key))
	}
	return msg, nil
}

// marshal splits what mr writes for msg into the payload and the other
// fields, as a transport.Publisher takes them.
func marshal(mr Marshaller, topic string, msg *message.Message) (payload []byte, headers map[string]string, err error) {
	values, err := mr.Marshal(topic, msg)
	if err != nil {
		return nil, nil, err
	}
	headers = make(map[string]string, len(values))
	for k, v := range values {
		var s string
		switch v := v.(type) {
		case nil:
		case string:
			s = v
		case []byte:
			s = string(v)
		case message.Payload:
			s = string(v)
		default:
			s = fmt.Sprint(v)
		}
		if k == "payload" {
			payload = []byte(s)
			continue
		}
		headers[k] = s
	}
	return payload, headers, nil
}
