// Package integration holds the tests that prove nandi's guarantees against
// real servers: a real redis-server (single, restarted, with a replica, a
// three-master cluster), started by internal/redistest on ephemeral
// loopback ports, with faults injected per worker through toxiproxy.
package integration
