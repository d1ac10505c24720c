// Package kafkatopic is the Kafka shared-topic transport
// (github.com/segmentio/kafka-go): every worker of a nandi group reads every
// partition of the topic, with no consumer group, from the per-partition
// offsets the consumer's checkpoint ledger keeps, and handles what its lease
// owns. A topic of 3 partitions can so be served by 10 workers, with per-key
// order kept (a key stays in one partition, and one worker owns it).
//
// Partitions are the shards and offsets the positions. The task id is the
// message key (a decimal, or hashed), or Options.Key; a message without a
// key carries an error naming its partition and offset and goes to the
// consumer's failure policy.
//
// With Options.CommitGroup, the group's low watermark (the offset below which
// every index has finished) is committed as that consumer group's offset,
// so that lag tools (kafka-consumer-groups, Burrow, exporters) keep working.
// KEDA's kafka scaler reads that group's lag too, with two settings it
// needs because no member of the group is ever joined (nandi's workers read
// the partitions themselves): allowIdleConsumers "true" (otherwise it caps
// replicas at the partitions with an active member: none) and
// offsetResetPolicy "earliest" only if the group starts from the log's
// start (the default; StartAtEnd is "latest"). nandi scaler needs neither
// (docs/autoscaling.md). Backlog counts each partition's records after the
// group's position from its end offset, with no read.
//
// # Configuration, security and errors
//
// Options.Reader is a kafka.ReaderConfig template for the partition
// readers (isolation level, fetch sizes, backoff, a Dialer of your own):
// everything but the brokers, topic, partition and group is used as given.
// Options.SASL and Options.TLS are the one place for credentials: they go
// into the readers' Dialer and the Transport of metadata, offsets and
// commits alike. A reader's fetch error (a wrong password, a broker down)
// is returned by the next Fetch that has no message to return, so the
// consumer logs it once per spell and counts it
// (nandi_consumer_fetch_failures_total); FetchErrors counts them here too.
// The partitions are described at every Open (every term) and every
// consumer.Options.DescribeInterval (10s) while a term is served: the
// consumer opens the topic again when it has more, so partitions added to
// the topic are read from their start within that time. (A
// kafka.Transport of your own answers metadata from its cache, up to its
// MetadataTTL of 6s, which adds to that.) An aligned topic that grows
// loses and repeats nothing: every worker reads each old partition up to
// where it ended when the growth was seen (those records were placed by
// the old count), then its own partitions only; a record in a partition
// its key does not belong to (a producer with another partitioner) makes
// the group read every partition (docs/transports.md, "Aligned shards").
//
// # Writing tasks
//
// NewProducer wraps a kafka-go Writer as a transport.Publisher: a Writer
// with no Balancer gets Balancer (partition TaskID(key) % partitions, for
// a Source with Options.Aligned), one whose balancer ignores the key
// (kafka-go's default, round robin, or least-bytes: a key's tasks would
// land in several partitions, out of order) is refused, and a task with
// no key is refused before anything is written.
package kafkatopic
