package watermillpubsub_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nandi-go/nandi/watermillpubsub"
)

// Metadata that the transport would read as the key ("id" on Redis
// Streams) or the UUID's header is refused, saying which, and nothing of
// that message is written; the messages before it are.
func TestPublishRefusesMetadataThatWouldBeReadAsTheKey(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	pub, err := watermillpubsub.NewPublisher(watermillpubsub.PublisherConfig{
		Publisher: func(topic string) (transport.Publisher, error) {
			src, err := redisstream.New(c, topic, redisstream.Options{})
			if err != nil {
				return nil, err
			}
			return src.Producer(redisstream.ProducerOptions{})
		},
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	good := message.NewMessage(watermill.NewUUID(), []byte("a"))
	bad := message.NewMessage(watermill.NewUUID(), []byte("b"))
	bad.Metadata.Set("id", "7")
	err = pub.Publish("orders", good, bad)
	if !errors.Is(err, transport.ErrInvalidTask) || !strings.Contains(err.Error(), `"id"`) || !strings.Contains(err.Error(), bad.UUID) {
		t.Errorf("Publish with metadata id: %v; want ErrInvalidTask naming the message and the header", err)
	}
	if n := c.XLen(t.Context(), "orders").Val(); n != 1 {
		t.Errorf("%d entries written; want 1 (the message before the refused one)", n)
	}
	uuid := message.NewMessage(watermill.NewUUID(), nil)
	uuid.Metadata.Set(watermillpubsub.UUIDHeader, "x")
	if err := pub.Publish("orders", uuid); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("Publish with the UUID's header as metadata: %v; want a refusal", err)
	}
}
