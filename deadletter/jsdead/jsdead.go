package jsdead

import (
	"context"
	"fmt"

	"github.com/nandi-go/nandi/deadletter"
	"github.com/nandi-go/nandi/transport"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KeyHeader holds the task's key (natsjs.Options.KeyHeader's default).
const KeyHeader = "id"

// Sink returns a DeadLetter publishing to subject through js.
func Sink(js jetstream.JetStream, subject string) func(ctx context.Context, m *transport.Message, cause error) error {
	return func(ctx context.Context, m *transport.Message, cause error) error {
		msg := nats.NewMsg(subject)
		msg.Data = m.Payload
		for k, v := range m.Headers {
			msg.Header[k] = []string{v}
		}
		msg.Header[KeyHeader] = []string{m.Key}
		for k, v := range deadletter.Describe(ctx, m, cause) {
			msg.Header[deadletter.Header(k)] = []string{v}
		}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			return fmt.Errorf("jsdead: publish %q to %s: %w", m.Key, subject, err)
		}
		return nil
	}
}
