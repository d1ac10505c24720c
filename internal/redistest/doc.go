// Package redistest starts real Redis servers for tests and lets a test
// kill, restart, replicate, cluster and cut them.
//
// Where a server comes from, in order: a redis-server binary on PATH
// (started on an ephemeral loopback port, in a temporary directory, without
// persistence unless asked); else a container from testcontainers-go when a
// Docker engine answers (run by internal/containers, a module of its own,
// so that testcontainers-go is never a dependency of the packages whose
// tests use this one); else the address in NANDI_REDIS_ADDR. When none is
// available the test fails with a message that says how to provide one: it
// never skips. A test that needs to control the process (kill, restart,
// replicas, cluster) fails clearly when the server is not one it started.
//
// Link is a plain TCP link in front of a server that can stop carrying
// bytes (Hold), for the packages' own tests; internal/faultproxy (a
// toxiproxy) has the other faults, for the integration and chaos suites.
package redistest
