-- Opens the checkpoint ledger of a group for a lease holder, creating the
-- next epoch when the holder's replicas differ from the current epoch's.
--
-- KEYS[1]  {name}:ledger (a hash)
-- ARGV[1]  replicas of the holder's lease
-- ARGV[2]  the lease's token
-- ARGV[3]  shards of the source
-- ARGV[4..] where each shard starts for a group with no ledger (encoded)
--
-- Fields: cur, hist ("1 2 3"), and per epoch n: n:r, n:tok, n:shards,
-- n:start:s, n:pos:s:k, n:ptok:s:k. Positions are encoded with fixed-width
-- decimals, so string order is position order.
--
-- Replies {"ok", n}: the current epoch n has the holder's replicas;
-- {"new", n}: epoch n was created for them; {"stale", n, r, tok}: the
-- current epoch has other replicas and was created by a newer lease.
local key = KEYS[1]
local r = tonumber(ARGV[1])
local tok = tonumber(ARGV[2])
local shards = tonumber(ARGV[3])

local function get(f) return redis.call('HGET', key, f) end

local function create(n, starts, histstr)
  for s = 0, shards - 1 do
    redis.call('HSET', key, n .. ':start:' .. s, starts[s + 1])
  end
  redis.call('HSET', key, n .. ':r', r, n .. ':tok', tok, n .. ':shards', shards, 'cur', n, 'hist', histstr)
end

local cur = get('cur')
if not cur then
  local starts = {}
  for s = 0, shards - 1 do starts[s + 1] = ARGV[4 + s] end
  create(1, starts, '1')
  return {'new', 1}
end
cur = tonumber(cur)
local rc = tonumber(get(cur .. ':r'))
local cshards = tonumber(get(cur .. ':shards'))

if rc == r then
  if shards > cshards then -- the source grew: new shards start at their origin
    for s = cshards, shards - 1 do
      redis.call('HSET', key, cur .. ':start:' .. s, ARGV[4 + s])
    end
    redis.call('HSET', key, cur .. ':shards', shards)
  end
  return {'ok', cur}
end
local ctok = tonumber(get(cur .. ':tok'))
if tok <= ctok then
  return {'stale', cur, rc, ctok}
end

-- pos of index k in shard s of epoch h, defaulting to the epoch's start.
local function pos(h, s, k)
  return get(h .. ':pos:' .. s .. ':' .. k) or get(h .. ':start:' .. s)
end

-- The new epoch starts, per shard, at the minimum of the current one.
local n = cur + 1
local starts = {}
for s = 0, shards - 1 do
  if s < cshards then
    local lo = nil
    for k = 0, rc - 1 do
      local p = pos(cur, s, k)
      if lo == nil or p < lo then lo = p end
    end
    starts[s + 1] = lo
  else
    starts[s + 1] = ARGV[4 + s]
  end
end

-- An older epoch leaves the history once the new start has passed its
-- maximum in every shard: nothing below it will be read again.
local kept = {}
for h in string.gmatch(get('hist') or '', '%d+') do
  local hs = tonumber(get(h .. ':shards'))
  local hr = tonumber(get(h .. ':r'))
  local needed = false
  for s = 0, hs - 1 do
    for k = 0, hr - 1 do
      if s >= shards or pos(h, s, k) > starts[s + 1] then needed = true end
    end
  end
  if needed then
    table.insert(kept, h)
  else
    local fields = {h .. ':r', h .. ':tok', h .. ':shards'}
    for s = 0, hs - 1 do
      table.insert(fields, h .. ':start:' .. s)
      for k = 0, hr - 1 do
        table.insert(fields, h .. ':pos:' .. s .. ':' .. k)
        table.insert(fields, h .. ':ptok:' .. s .. ':' .. k)
      end
    end
    redis.call('HDEL', key, unpack(fields))
  end
end
table.insert(kept, tostring(n))
create(n, starts, table.concat(kept, ' '))
return {'new', n}
