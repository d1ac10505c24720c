-- Says that the holder of index k is ready to hand its share over (the
-- fenced handoff's first phase): its term is kept to its cap because the
-- group changed. Each holder drains and releases only once every index
-- the epoch holds is ready, so that a holder that never will be (killed,
-- stopped) leaves the others serving their shares to their caps rather
-- than stopping for a handoff that cannot come. See docs/PROTOCOL.md,
-- "The fenced handoff", and common.lua (before this).
--
-- ARGV[1] epoch, ARGV[2] token, ARGV[3] index k, ARGV[4] replicas
--
-- Replies {"ok", ready, held}: the epoch's indexes held (opened and not
-- released) and how many of them are ready; {"moved"} when the epoch is
-- not current or of other replicas; {"fenced"} when a newer holder of k
-- opened it or the writer is not its newest opener; {"corrupt", 0,
-- "field = value"} when a count it would add to is not an integer (checked
-- before any write: a script that fails keeps what it wrote). Idempotent:
-- a holder polls with it.
local e, tok, k, r = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
if get('cur') ~= e or get(e .. ':r') ~= r then return {'moved'} end
local o = tonumber(redis.call('HGET', marksKey, e .. ':o:' .. k))
if not o or o ~= tok then return {'fenced'} end
for _, f in ipairs({e .. ':ready', e .. ':held'}) do
  local v = get(f)
  if v and not (tonumber(v) and math.floor(tonumber(v)) == tonumber(v)) then return corrupt(f) end
end
local rel = tonumber(redis.call('HGET', marksKey, e .. ':rel:' .. k)) or 0
local rdy = tonumber(redis.call('HGET', marksKey, e .. ':rdy:' .. k)) or 0
if rel < tok and rdy < tok then
  redis.call('HSET', marksKey, e .. ':rdy:' .. k, ARGV[2])
  redis.call('HINCRBY', head, e .. ':ready', 1)
end
return {'ok', num(e .. ':ready') or 0, num(e .. ':held') or 0}
