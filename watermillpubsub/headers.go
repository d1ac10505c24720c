package watermillpubsub

import (
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nandi-go/nandi/transport"
)

// UUIDHeader is the header a message's UUID travels in, as
// watermill-redisstream names it; a message's metadata may not use it.
const UUIDHeader = "_watermill_message_uuid"

// headersOf is what the Publisher writes beside msg's payload.
func headersOf(msg *message.Message) map[string]string {
	h := make(map[string]string, len(msg.Metadata)+1)
	for k, v := range msg.Metadata {
		h[k] = v
	}
	h[UUIDHeader] = msg.UUID
	return h
}

// messageOf is the Watermill message of a task: its UUID from the header
// (the task's key for a message some other producer wrote), its metadata
// the other headers.
func messageOf(m *transport.Message) *message.Message {
	uuid := m.Headers[UUIDHeader]
	if uuid == "" {
		uuid = m.Key
	}
	msg := message.NewMessage(uuid, m.Payload)
	for k, v := range m.Headers {
		if k != UUIDHeader {
			msg.Metadata.Set(k, v)
		}
	}
	return msg
}
