// Package metrics exports nandi's leases and consumers to Prometheus.
//
// Register a lease (RegisterLease) or a consumer with its lease (Register)
// on a registry you pass; nothing is registered on the global one. (A
// watermillfilter.Filter registers with package metrics/watermillmetrics,
// so that this package never pulls Watermill into a build; an
// exactly-once sink's counts, sink/pgsink's, register with RegisterSink,
// which takes them as a function, so that this package fetches no
// database driver.) The
// collectors read the lease's and the consumer's counts at scrape time, so
// they cost nothing between scrapes. Every metric carries the label
// group (the lease's Options.Name); add your own (a pod name) with
// Options.ConstLabels.
//
// The lease:
//
//	nandi_lease_held                            gauge    1 while a term is held, else 0
//	nandi_lease_index                           gauge    the index held; -1 when none
//	nandi_lease_replicas                        gauge    the replicas of the term held; 0 when none
//	nandi_lease_token                           gauge    the fencing token of the term held; 0 when none
//	nandi_lease_handing_over                    gauge    1 while the term held is handed over (kept to its cap after a change of mapping)
//	nandi_lease_calls_total                     counter  registration calls the store answered
//	nandi_lease_registrations_total             counter  calls the group counted (one per interval when healthy)
//	nandi_lease_registration_failures_total     counter  calls that failed: network, timeout, WAIT not acknowledged
//	nandi_lease_registration_refusals_total     counter  calls refused: the group runs with other settings
//	nandi_lease_registration_duration_seconds   histogram round trip of every answered call
//	nandi_lease_terms_total                     counter  terms acquired
//	nandi_lease_stand_downs_total{reason}       counter  terms ended: mapping_changed, expired, generation_changed, stopped
//	nandi_lease_held_seconds_total              counter  time spent holding
//	nandi_lease_unheld_seconds_total            counter  time spent running without a term (joining, standing down)
//
// The consumer:
//
//	nandi_consumer_messages_total{outcome}      counter  handled, not_owned, done_before, dead_lettered, skipped, abandoned, lost_unowned, bad_shard
//	nandi_consumer_handler_failures_total       counter  failed handler attempts (each is retried, dead-lettered or skipped)
//	nandi_consumer_panics_total                 counter  calls into user code that panicked (handler, DeadLetter, OnError, ID)
//	nandi_consumer_in_flight                    gauge    calls into user code running now
//	nandi_consumer_overdue_handlers             gauge    handlers still running after their term ended (their context cancelled)
//	nandi_consumer_overdue_handlers_total       counter  handlers that outlived their term
//	nandi_consumer_pending                      gauge    tasks taken and not finished (queued, running, waiting to retry)
//	nandi_consumer_oldest_unfinished_seconds{shard} gauge age of the oldest unfinished task, per shard, while serving
//	nandi_consumer_unserved                     gauge    1 while a term is held but its checkpoints or source cannot be opened
//	nandi_consumer_open_failures_total          counter  failed opens of the checkpoints or the source (retried while the term lasts)
//	nandi_consumer_fetch_failures_total         counter  failed fetches (retried with backoff)
//	nandi_consumer_checkpoint_failures_total    counter  failed checkpoint writes
//	nandi_consumer_ledger_losses_total          counter  opens that found the checkpoint ledger gone or behind what the worker had seen
//	nandi_consumer_read_total                   counter  messages read from the source
//	nandi_consumer_owned_total                  counter  messages read that the lease owned (over a group, read / owned is the read amplification)
//	nandi_consumer_rate_waits_total             counter  handler calls that waited for the group's rate limit (Options.GroupRate)
//	nandi_consumer_paused_since_seconds         gauge    while the group is paused (nandi pause), when the pause began; absent otherwise
//	nandi_consumer_waiting                      gauge    tasks waiting behind an id whose first task has failed, held as their place in the log only
//	nandi_consumer_reread_total                 counter  messages read again from the log: tasks that had waited behind a failing id
//	nandi_consumer_ledger_corrupt_total         counter  opens that found the checkpoint ledger unreadable: nothing of it served, retried while the term lasts
//	nandi_consumer_rewinds_total                counter  shards found to end below their checkpoint (a log recreated): read again from their start
//	nandi_consumer_drain_duration_seconds       histogram from stopping intake to the last handler's return, per drain
//	nandi_consumer_handler_duration_seconds     histogram every handler call
//	nandi_group_lag_messages{shard}             gauge    offsets between the group's lowest checkpoint and the log's end (every worker reports it, held or not)
//	nandi_group_lag_seconds{shard}              gauge    the same in entry time (Redis Streams)
//	nandi_consumer_checkpoint_writes_total      counter  checkpoint writes
//	nandi_consumer_terms_total                  counter  terms served
//	nandi_consumer_lag_messages{shard}          gauge    offsets between the held index's checkpoint and the log's end (Kafka, JetStream, memory)
//	nandi_consumer_lag_seconds{shard}           gauge    entry-time between the held index's checkpoint and the stream's end (Redis Streams)
//	nandi_consumer_dropped_total                counter  messages the transport dropped before the consumer read them (NATS core slow consumer); for Redis Streams, producer trims that removed unread entries (at least one each)
//
// lost_unowned counts messages of a source that keeps nothing (NATS core)
// that arrived while this worker held no lease: gone. The lag gauges serve
// what the consumer computed last, once per lease interval
// (Consumer.LastLag): a scrape does no I/O. The consumer's lag gauges exist
// only while a term is held (as of that computation); they count the
// log between this index's checkpoint and the end, the other indexes'
// messages included. The group's lag gauges read the checkpoint ledger as
// well and are there whether the worker holds anything or not: every
// worker reports the same value (aggregate with max).
//
// NewBacklogCollector exports the backlog in entries once per group, from
// the ledger and the log with no worker running (nandi scaler serves it,
// for KEDA and Prometheus; docs/autoscaling.md):
//
//	nandi_group_lag_entries{group,shard,source} gauge  entries of the shard's log at or after the group's low watermark
//	nandi_group_backlog_entries{group}          gauge  their sum: what an autoscaler scales on
//	nandi_group_backlog_read_ok{group}          gauge  1 when the group's backlog was read at this scrape, else 0
package metrics
