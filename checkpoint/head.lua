-- Reads a group's ledger head, and the low watermark of every shard of
-- its current epoch: {lows (space-separated, one per shard), head fields
-- as HGETALL returns them}. A script rather than HGETALL so that a client
-- that routes reads to replicas still reads the master. See common.lua
-- (before this).
local cur = get('cur')
local out = {''}
if cur and check() == nil then
  local ls = {}
  for s = 0, num(cur .. ':shards') - 1 do table.insert(ls, lowOf(tonumber(cur), s)) end
  out[1] = table.concat(ls, ' ')
end
for _, x in ipairs(redis.call('HGETALL', head)) do table.insert(out, x) end
return out
