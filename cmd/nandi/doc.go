// Command nandi inspects and operates a running group, and plans a new
// one.
//
//	nandi groups -redis redis://localhost:6379 [-json]
//	nandi status -redis redis://localhost:6379 -group mail-sender [-json]
//	nandi watch  -redis redis://localhost:6379 -group mail-sender
//	nandi web    -redis redis://localhost:6379 [-addr 127.0.0.1:8080] [-group NAME] [-read-only] [-tls-cert F -tls-key F | -tls-proxy]
//	nandi plan   -interval 5s -gap 0.125 -rtt 2ms -jitter 1ms -workers 200 [-redis URL]
//	nandi pause|resume, nandi dead list|show|replay, nandi checkpoint reset [-dry-run], nandi version
//
// nandi help lists every command; nandi help COMMAND (or nandi COMMAND -h)
// shows its flags. The conventions are those of every Unix tool: help
// goes to stdout and exits 0; a usage error (an unknown command or flag,
// an argument left over, a bad value, a required flag missing) is said on
// stderr with the command's synopsis and exits 2; a failure (Redis
// unreachable, a refused change, a plan that does not fit) is one line on
// stderr and exits 1. -redis defaults to $NANDI_REDIS_URL, else
// $REDIS_URL; a host:port where a URL goes is answered with "did you mean
// redis://host:port?". A Redis that does not answer a PING within 5s (one
// dial retry) is reported in one line, "cannot reach Redis at ADDR: ...",
// without go-redis's own log lines. SIGTERM ends watch and web as ^C
// does (exit 0), for a pod being stopped. status of a group nothing is
// known of says so in one line (exit 1); a stopped group (no lease state)
// still shows its checkpoints, workers' last records and dead letters.
//
// groups lists every group on a Redis (by its keys) with its workers,
// replicas, largest lag, pause and dead letters. status prints the group's
// settings, the counts of the intervals its hash keeps, the store
// generation, the workers (their presence records: what each holds since
// when, counts, lag, oldest task, last error), the checkpoint epochs with
// each index's positions, and the lag per shard in entries and age. watch
// prints one line per interval, marking rebalances with who joined or
// left. dead list, show and replay handle the group's dead letters (replay
// puts each back where it came from, or on -to's streams, which must
// exist unless -create).
//
// web serves a page per group that updates live over server-sent events:
// the registrations of the last intervals with rebalances, stand-downs and
// store generation changes marked; the mapping, one row per index with its
// worker, lag and oldest task; the checkpoint epochs; the settings and the
// plan's verdict; handled and failed per minute; the dead letters. It acts
// too, unless -read-only: pause and resume the group, show, replay or
// delete a dead letter, each a POST behind the token (when set) and a CSRF
// check (the page's own origin and its session's token; a script sending
// the token as a bearer token needs no CSRF token). It polls each group
// once per quarter interval however many pages watch, the page is
// embedded in the binary, and everything a worker wrote is shown as text. It listens on 127.0.0.1 by
// default and, without a token, answers only requests addressed to
// localhost, a loopback address or its listen address (421 otherwise: no
// DNS rebinding). It refuses to listen beyond localhost without
// NANDI_WEB_TOKEN (or -token, which ps shows to every user), which every
// request must then carry as a bearer token (or as the cookie that
// opening the page once with ?token= sets); -tls-cert and -tls-key serve
// HTTPS, -tls-proxy marks the cookie Secure behind an ingress that
// terminates TLS. Idle connections close after 2 minutes; at most 256
// pages stream at once. plan says what a setting
// costs (time to a first lease, pause per change, spacing of
// registrations) and whether the network fits inside the gap; with -redis
// it measures the round trip itself. It exits 1 on a verdict of FAIL, 2 on
// settings no lease accepts.
//
// -redis takes a server, a Redis Cluster or Sentinels, in go-redis's URL
// forms:
//
//	redis://[user:pass@]host:port[/db]              a server, or any node of a Cluster
//	redis+cluster://host:port[?addr=host2:port2]   a Cluster (also: redis://...?addr=...)
//	redis://sentinel:26379?master_name=mymaster[&addr=sentinel2:26379]
//	redis+sentinel://sentinel:26379?master_name=mymaster
//
// rediss (rediss+cluster, rediss+sentinel) for TLS. A plain URL to a node
// of a Cluster is found out (INFO cluster) and read through a cluster
// client.
package main
