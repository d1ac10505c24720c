-- Opens a group's checkpoint ledger for a lease holder, atomically, and
-- returns the whole ledger. Creates the next epoch when the holder's
-- replicas differ from the current epoch's; notices a ledger that is gone
-- or behind what the holder saw. See docs/PROTOCOL.md, "Checkpoints".
--
-- KEYS[1]  {name}:ledger (a hash)
-- ARGV[1]  replicas of the holder's lease
-- ARGV[2]  the lease's token
-- ARGV[3]  the holder's index
-- ARGV[4]  shards of the source
-- ARGV[5]  the highest epoch this worker has seen (0: none)
-- ARGV[6]  1 when the source is aligned (shard s holds only ids with
--          id % shards == s), else 0
-- ARGV[7 .. 6+shards]           where each shard starts for a group with no ledger
-- ARGV[7+shards .. 6+2*shards]  the start of that seen epoch (the origin when none)
-- ARGV[7+2*shards ..]           shards whose log went back below the marks
--                                (recreated): they start again at the origin
--
-- Fields: v (format), cur, hist ("1 2 3"); per epoch n: n:r, n:tok,
-- n:shards, n:start:s, n:aligned (A: the shard count its log is aligned
-- to, 0 or absent when not; shard s < A holds only ids with id % A == s,
-- so only the indexes that can own such ids have marks there); per index k: n:otok:k (the newest holder that
-- opened it); per shard s and index k: n:pos:s:k (low), n:top:s:k (high),
-- n:und:s:k (undone positions between), n:ptok:s:k (their writer's token).
-- Positions are encoded with fixed-width decimals, so string order is
-- position order.
--
-- Reply: {status, n, why, fields...}. status "ok": epoch n is current and
-- has the holder's replicas; "new": epoch n was created for them;
-- "stale": the current epoch n has other replicas and was created by a
-- newer lease (why: its replicas and token). why is "" or, for "ok" and
-- "new", "lost" (no ledger though the worker saw epoch ARGV[5]: it was
-- recreated at that epoch's start) or "behind" (the current epoch is older
-- than the one the worker saw). fields is the ledger after the open, as
-- HGETALL returns it. {"corrupt", 0, "field = value"}: an epoch's replicas
-- or shards are not a whole number from 1 to 65536, or the two multiply
-- past 1048576 (nothing was written).
local key = KEYS[1]
local r = tonumber(ARGV[1])
local tok = tonumber(ARGV[2])
local k = ARGV[3]
local shards = tonumber(ARGV[4])
local seen = tonumber(ARGV[5])
local aligned = ARGV[6] == '1'
local o = 7 -- where the origins begin
local rewound = {}
for i = o + 2 * shards, #ARGV do rewound[tonumber(ARGV[i])] = true end
local anyRewound = next(rewound) ~= nil

local function get(f) return redis.call('HGET', key, f) end
local function reply(status, n, why)
  local out = {status, n, why}
  for _, x in ipairs(redis.call('HGETALL', key)) do table.insert(out, x) end
  return out
end
-- The newest holder of index k to open epoch n fences older ones' writes.
local function stamp(n)
  local f = n .. ':otok:' .. k
  local o = tonumber(get(f))
  if not o or o < tok then redis.call('HSET', key, f, ARGV[2]) end
end

local function create(n, starts, histstr, A)
  for s = 0, shards - 1 do
    redis.call('HSET', key, n .. ':start:' .. s, starts[s + 1])
  end
  redis.call('HSET', key, 'v', '2', n .. ':r', r, n .. ':tok', ARGV[2], n .. ':shards', shards, n .. ':aligned', A, 'cur', n, 'hist', histstr)
end

local function gcd(a, b)
  -- (not `a, b = b, a % b`: gopher-lua, miniredis's Lua, assigns a
  -- before it computes a % b, and answered gcd(1, 2) = 2)
  while b ~= 0 do
    local t = a % b
    a = b
    b = t
  end
  return a
end
-- Whether index i of r can own a task in shard s of an epoch aligned to A
-- shards (A = 0: not aligned, every index can).
local function canOwn(A, rr, s, i)
  if A == 0 or s >= A then return true end
  local g = gcd(A, rr)
  return s % g == i % g
end

local cur = get('cur')
if not cur then
  local starts = {}
  local n, why = 1, ''
  for s = 0, shards - 1 do starts[s + 1] = ARGV[o + s] end
  if seen > 0 then
    -- Lost (evicted, flushed, a failover before it replicated): start
    -- again where the worker knows every index had got to, never at the
    -- origin (StartAtEnd would skip what lies between).
    n, why = seen + 1, 'lost'
    for s = 0, shards - 1 do
      if not rewound[s] then starts[s + 1] = ARGV[o + shards + s] end
    end
  end
  local A = 0
  if aligned then A = shards end
  create(n, starts, tostring(n), A)
  stamp(n)
  return reply('new', n, why)
end
-- The counts the script loops over (every epoch's replicas and shards)
-- are checked before anything is written: a damaged ledger is refused
-- ("corrupt", naming the field), never looped over a billion times.
local function count(f)
  local n = tonumber(get(f))
  if not n or n < 1 or n > 65536 or n % 1 ~= 0 then return nil end
  return n
end
local function corrupt(f) return {'corrupt', 0, f .. ' = ' .. tostring(get(f))} end
if not tonumber(cur) then return corrupt('cur') end
cur = tonumber(cur)
for h in string.gmatch((get('hist') or '') .. ' ' .. cur, '%d+') do
  for _, f in ipairs({h .. ':r', h .. ':shards'}) do
    if not count(f) then return corrupt(f) end
  end
  if count(h .. ':r') * count(h .. ':shards') > 1048576 then return corrupt(h .. ':shards') end
  local al = get(h .. ':aligned')
  if al and al ~= '0' and not count(h .. ':aligned') then return corrupt(h .. ':aligned') end
end
local why = ''
if seen > cur then why = 'behind' end
local rc = count(cur .. ':r')
local cshards = count(cur .. ':shards')

if rc == r and not anyRewound then
  if shards > cshards then -- the source grew: new shards start at their origin
    for s = cshards, shards - 1 do
      redis.call('HSET', key, cur .. ':start:' .. s, ARGV[o + s])
    end
    redis.call('HSET', key, cur .. ':shards', shards)
  end
  stamp(cur)
  return reply('ok', cur, why)
end
local ctok = tonumber(get(cur .. ':tok'))
if rc ~= r and tok <= ctok then
  return {'stale', cur, rc .. ' ' .. ctok}
end

-- low and high of index i in shard s of epoch h, defaulting to the start.
local function low(h, s, i)
  return get(h .. ':pos:' .. s .. ':' .. i) or get(h .. ':start:' .. s)
end
local function high(h, s, i)
  return get(h .. ':top:' .. s .. ':' .. i) or low(h, s, i)
end

-- The new epoch starts, per shard, at the lowest low of the current one's
-- indexes that can own tasks there: below it every index is done. Its log
-- stays aligned to the count the current epoch's was (a log that grew
-- shards keeps what it held aligned to the old count). Alignment is never
-- adopted by a ledger that began without it: its log may hold entries
-- placed otherwise (streams written before their source declared them
-- aligned), and a worker that skipped shards would skip them.
local n = cur + 1
local Ac = tonumber(get(cur .. ':aligned') or '0') or 0
local A = 0
if aligned then A = Ac end
local starts = {}
for s = 0, shards - 1 do
  if rewound[s] then
    starts[s + 1] = ARGV[o + s]
  elseif s < cshards then
    local lo = nil
    for i = 0, rc - 1 do
      if canOwn(Ac, rc, s, i) then
        local p = low(cur, s, i)
        if lo == nil or p < lo then lo = p end
      end
    end
    starts[s + 1] = lo
  else
    starts[s + 1] = ARGV[o + s]
  end
end

-- An older epoch leaves the history once the new start has passed
-- everything it says is done, in every shard: nothing it could skip will
-- be read again.
local kept = {}
for h in string.gmatch(get('hist') or '', '%d+') do
  local hs = tonumber(get(h .. ':shards'))
  local hr = tonumber(get(h .. ':r'))
  -- What an older epoch says of a rewound shard is about a log that is
  -- gone: it starts at the origin, and skips nothing there.
  for s = 0, hs - 1 do
    if rewound[s] then
      redis.call('HSET', key, h .. ':start:' .. s, ARGV[o + s])
      for i = 0, hr - 1 do
        redis.call('HDEL', key, h .. ':pos:' .. s .. ':' .. i, h .. ':top:' .. s .. ':' .. i, h .. ':und:' .. s .. ':' .. i)
      end
    end
  end
  local needed = false
  for s = 0, hs - 1 do
    for i = 0, hr - 1 do
      if s >= shards or high(h, s, i) > starts[s + 1] then needed = true end
    end
  end
  if needed then
    table.insert(kept, h)
  else
    local fields = {h .. ':r', h .. ':tok', h .. ':shards', h .. ':aligned', h .. ':reset'}
    for i = 0, hr - 1 do table.insert(fields, h .. ':otok:' .. i) end
    for s = 0, hs - 1 do
      table.insert(fields, h .. ':start:' .. s)
      for i = 0, hr - 1 do
        for _, x in ipairs({'pos', 'top', 'und', 'ptok'}) do
          table.insert(fields, h .. ':' .. x .. ':' .. s .. ':' .. i)
        end
      end
    end
    redis.call('HDEL', key, unpack(fields))
  end
end
table.insert(kept, tostring(n))
create(n, starts, table.concat(kept, ' '), A)
stamp(n)
return reply('new', n, why)
