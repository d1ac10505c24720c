// Package natstest starts an embedded nats-server (github.com/nats-io/nats-server/v2)
// with JetStream, on an ephemeral loopback port, for tests.
package natstest
