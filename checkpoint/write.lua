-- Writes one holder's checkpoints, fenced by epoch and by lease token.
-- See docs/PROTOCOL.md, "Checkpoints".
--
-- KEYS[1]  {name}:ledger
-- ARGV[1]  epoch, ARGV[2] token, ARGV[3] index k, ARGV[4] replicas r of the
--          writer's lease ("0": not checked), then per shard four values:
--          shard, low, high, undone (space-separated; "" for none)
--
-- Replies {"ok"}, {"moved", cur, its replicas} when the epoch is no longer current or
-- is of another mapping (a ledger lost and created again reuses epoch
-- numbers: checkpoint/model found a former holder's late write landing in
-- an epoch of other replicas), or
-- {"fenced", tok} when a newer holder of k has opened or written in this
-- epoch. A shard whose low would go below what is stored keeps what is
-- stored: a checkpoint never goes backwards within an epoch.
local key = KEYS[1]
local e = ARGV[1]
local tok = tonumber(ARGV[2])
local k = ARGV[3]
local r = ARGV[4]
local cur = redis.call('HGET', key, 'cur')
if cur ~= e then
  return {'moved', cur or '0', cur and redis.call('HGET', key, cur .. ':r') or '0'}
end
local rc = redis.call('HGET', key, e .. ':r')
if r ~= '0' and rc ~= r then
  return {'moved', cur, rc or '0'}
end
local o = redis.call('HGET', key, e .. ':otok:' .. k)
if o and tonumber(o) > tok then
  return {'fenced', o}
end
for i = 5, #ARGV, 4 do
  local pt = redis.call('HGET', key, e .. ':ptok:' .. ARGV[i] .. ':' .. k)
  if pt and tonumber(pt) > tok then
    return {'fenced', pt}
  end
end
for i = 5, #ARGV, 4 do
  local f = function(x) return e .. ':' .. x .. ':' .. ARGV[i] .. ':' .. k end
  local old = redis.call('HGET', key, f('pos'))
  if not old or ARGV[i + 1] >= old then
    redis.call('HSET', key, f('pos'), ARGV[i + 1], f('ptok'), ARGV[2])
    if ARGV[i + 2] > ARGV[i + 1] then
      redis.call('HSET', key, f('top'), ARGV[i + 2])
    else
      redis.call('HDEL', key, f('top'))
    end
    if ARGV[i + 3] ~= '' then
      redis.call('HSET', key, f('und'), ARGV[i + 3])
    else
      redis.call('HDEL', key, f('und'))
    end
  end
end
return {'ok'}
