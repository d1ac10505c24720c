// Package jsdead is a ready-made consumer.Options.DeadLetter that
// publishes each dead task to a JetStream subject: the task's payload as
// the message's data, its key in the header "id" (so a natsjs Source
// reads the dead-letter stream as tasks again), its headers as given, and
// what deadletter.Describe says of it under "Nandi-" headers
// (Nandi-Error, Nandi-Attempts, Nandi-Worker, Nandi-Index,
// Nandi-Replicas, Nandi-Token, Nandi-System, Nandi-Source, Nandi-Shard,
// Nandi-Position, Nandi-At: where the task came from among them).
// The subject must belong to a stream; the publish waits for the
// stream's acknowledgement, and its error makes the consumer retry the
// dead letter.
package jsdead
