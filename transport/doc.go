// Package transport will define the Source contract a consumer needs, with
// implementations in subpackages: in-memory, Redis Streams, NATS (core and
// JetStream), Kafka (segmentio/kafka-go) and any Watermill subscriber. Not
// built yet.
package transport
