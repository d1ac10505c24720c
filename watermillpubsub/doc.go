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
package watermillpubsub
