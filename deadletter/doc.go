// Package deadletter ships dead letters you can see and replay: a
// ready-made consumer.Options.DeadLetter that writes each task the
// consumer gives up on to a Redis stream, with what a person needs to
// decide what to do with it, and the functions behind nandi dead list and
// nandi dead replay.
//
// Each dead letter is one entry of the stream (by default Stream(group),
// under the group's hash tag): the task's key, payload and headers as the
// source delivered them, the error, the attempts the handler had, the
// worker, the term's index, replicas and token, the task's shard and
// position, and the time. Replay publishes chosen letters back through a
// transport.Publisher (the group's source streams: the group handles them
// again, each key in its shard, in the order replayed) and deletes each
// letter once it is published, so a replay interrupted halfway can be
// run again: what was published is gone from the stream (Replay reports
// the one case where it is not: a delete that failed after its publish).
package deadletter
