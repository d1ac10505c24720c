-- Writes one holder's checkpoints, fenced by epoch and by lease token.
--
-- KEYS[1]  {name}:ledger
-- ARGV[1]  epoch, ARGV[2] token, ARGV[3] index k, then pairs: shard, pos
--
-- Replies {"ok"}, {"moved", cur} when the epoch is no longer current, or
-- {"fenced", tok} when a newer holder of k has written in this epoch.
local key = KEYS[1]
local e = ARGV[1]
local tok = tonumber(ARGV[2])
local k = ARGV[3]
local cur = redis.call('HGET', key, 'cur')
if cur ~= e then
  return {'moved', cur or '0'}
end
for i = 4, #ARGV, 2 do
  local pt = redis.call('HGET', key, e .. ':ptok:' .. ARGV[i] .. ':' .. k)
  if pt and tonumber(pt) > tok then
    return {'fenced', pt}
  end
end
for i = 4, #ARGV, 2 do
  local f = e .. ':' .. '%s:' .. ARGV[i] .. ':' .. k
  redis.call('HSET', key, string.format(f, 'pos'), ARGV[i + 1], string.format(f, 'ptok'), tok)
end
return {'ok'}
