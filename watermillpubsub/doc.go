// Package watermillpubsub is a Watermill Publisher and Subscriber backed
// by nandi: a log (Redis Streams, JetStream, Kafka) read by a group of
// subscribers that split each topic by key, each key's messages in order,
// under the lease's exclusivity and its fencing token.
//
// Lifecycle: NewSubscriber, then Subscribe once per topic and worker;
// every Subscribe of one consumer group (SubscriberConfig.ConsumerGroup)
// and topic is a member of that group, with its own lease registration
// (partition.Options, Name set per group and topic) and the group's
// checkpoint ledger on SubscriberConfig.Client. A message is delivered
// on the channel with its task's context (msg.Context(), so
// consumer.AssignmentFromContext works on it); Ack means the handler's
// work is done, Nack that it failed (the consumer's retry policy,
// consumer.Options, applies: the message comes again, and its key's later
// messages wait). Cancelling Subscribe's context drains that subscription
// (the four steps of consumer.Run) and closes its channel; Close does it
// for every subscription. A message delivered and not acknowledged when
// its subscription ends is not checkpointed: the group delivers it again.
//
// Guarantees: at-least-once delivery, order per key, never two members
// handling one key at once, nothing skipped. Watermill's own test suite
// (pubsub/tests.TestPubSub, watermill v1.5.1) passes over Redis Streams
// on a real redis-server with the Features watermill-redisstream declares
// for itself, and with the same Features over JetStream (an embedded
// nats-server) and Kafka (kfake, a Kafka protocol peer, not a broker),
// TestReconnect included: each server restarted twice on its data while
// 10,000 messages go through (pubsub_test.go).
//
// A Source that is an io.Closer is closed when its subscription ends; a
// producer that is one, by the Publisher's Close.
//
// The Publisher writes each message with its key (PublisherConfig.Key,
// the message's UUID by default), its payload, and its UUID and metadata
// as headers, which the Subscriber gives back as they were sent.
//
// SubscriberConfig.ConsumerGroup is required: Watermill's Redis, Kafka and
// NATS Pub/Subs take an empty group to mean that every subscriber gets
// every message, which a group that splits a topic cannot be; a subscriber
// that must get every message gets a group of its own.
//
// # Moving from watermill-redisstream
//
// A fleet can move one service at a time. Give watermill-redisstream's
// marshaller to both sides (PublisherConfig.Marshaller,
// SubscriberConfig.Unmarshaller: its DefaultMarshallerUnmarshaller fits
// both, or your own) and read the topic with redisstream.Options{Key:
// RedisStreamKey}: what watermill-redisstream's publishers write (no key
// of nandi's, the UUID and msgpack metadata in fields of their own) and
// what this package's Publisher writes are read by either side's
// subscribers with UUID, metadata and payload as sent
// (TestAStreamSharedWithWatermillRedisstream, against v1.4.5 on a real
// redis-server). A message the Unmarshaller cannot read goes to the
// failure policy once (by default the group's dead-letter stream).
//
// # Metrics and tracing
//
// SubscriberConfig.OnConsumer gets each subscription's consumer:
// metrics.Subscriptions(reg, opts) exports its figures under its group
// (GROUP:TOPIC) while it runs. SubscriberConfig.Handler wraps each
// subscription's handler: tracing.Handler makes each message a span
// (TestAWatermillSubscriptionIsMeasuredAndTraced in integration/).
package watermillpubsub
