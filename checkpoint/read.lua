-- Reads a group's checkpoint ledger. A script rather than HGETALL so that
-- a client that routes reads to replicas still reads the master.
return redis.call('HGETALL', KEYS[1])
