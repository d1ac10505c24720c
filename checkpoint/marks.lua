-- Reads marks of a group's ledger by field (n:s:k, n:o:k), a page at a
-- time: HMGET, as a script so that a client that routes reads to replicas
-- still reads the master.
--
-- KEYS[1] {name}:ledger:marks, ARGV the fields.
return redis.call('HMGET', KEYS[1], unpack(ARGV))
