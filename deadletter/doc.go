// Package deadletter ships dead letters you can see and replay: a
// ready-made consumer.Options.DeadLetter that writes each task the
// consumer gives up on to a Redis stream, with what a person needs to
// decide what to do with it, and the functions behind nandi dead list,
// show and replay.
//
// Each dead letter is one entry of the stream (by default Stream(group),
// under the group's hash tag): the task's key, payload and headers as the
// source delivered them, the error, the attempts the handler had, the
// worker, the term's index, replicas and token, where the task came from
// (the source's system and the stream, topic or subject of its shard:
// consumer.Failure's System and Source), its shard and position, and the
// time. Replay publishes chosen letters back through a
// transport.Publisher (the group's source streams: the group handles them
// again, each key in its shard, in the order replayed), ReplayEach
// through a publisher per letter (nandi dead replay without -to: each
// back to its Source), and each deletes a letter once it is published, so
// a replay interrupted halfway can be run again: what was published is
// gone from the stream (the one case where it is not, a delete that
// failed after its publish, is reported). Delete removes letters without
// replaying them.
package deadletter
