// Package kafkadead is a ready-made consumer.Options.DeadLetter that
// writes each dead task to a Kafka topic through a kafka-go Writer: the
// task's key as the record's key, its payload as the value, its headers
// as given, and what deadletter.Describe says of it under "Nandi-"
// headers (Nandi-Error, Nandi-Attempts, Nandi-Worker, Nandi-Index,
// Nandi-Replicas, Nandi-Token, Nandi-System, Nandi-Source, Nandi-Shard,
// Nandi-Position, Nandi-At: where the task came from among them). A
// kafkatopic Source reads the topic as tasks again. The write is
// synchronous unless the Writer is Async (then a lost letter goes
// unnoticed: keep it synchronous), and its error makes the consumer
// retry the dead letter.
package kafkadead
