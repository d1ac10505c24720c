-- Opens a group's checkpoint ledger for a lease holder, atomically, and
-- returns its head (every epoch's counts, starts, cuts and highest marks;
-- the marks themselves are read by marks.lua, a page at a time). Creates
-- the next epoch when the holder's replicas differ from the current
-- epoch's, a shard was rewound, or the shards of an aligned log changed;
-- notices a ledger that is gone or behind what the holder saw. See
-- docs/PROTOCOL.md, "Checkpoints", and common.lua (before this) for the
-- keys and fields.
--
-- ARGV[1]  replicas of the holder's lease
-- ARGV[2]  the lease's token
-- ARGV[3]  the holder's index
-- ARGV[4]  shards of the source
-- ARGV[5]  the highest epoch this worker has seen (0: none)
-- ARGV[6]  1 when the source is aligned (shard s holds only ids with
--          id % shards == s), else 0; followed by "p" when the lease's
--          term is provisional (the fenced handoff: it may open only an
--          epoch every index of which has been released)
-- ARGV[7 .. 6+shards]            where each shard starts for a group with no ledger
-- ARGV[7+shards .. 6+2*shards]   the start of that seen epoch (the origin when none)
-- ARGV[7+2*shards .. 6+3*shards] the end of each shard now (where the log
--                                 grew: what lies below was placed by the old count)
-- ARGV[7+3*shards ..]            shards whose log went back below the marks
--                                 (recreated): they start again at the origin
--
-- Reply: {status, n, why, fields...}. status "ok": epoch n is current and
-- has the holder's replicas; "new": epoch n was created for them;
-- "stale": the current epoch n has other replicas and was created by a
-- newer lease (why: its replicas and token). why is "" or, for "ok" and
-- "new", "lost" (no ledger though the worker saw epoch ARGV[5]: it was
-- recreated at that epoch's start) or "behind" (the current epoch is older
-- than the one the worker saw), followed by " takeover" when the holder
-- took its index over from an opener that had not released it (stamp).
-- fields is the head after the open, as
-- HGETALL returns it. {"corrupt", 0, "field = value"}: a count the script
-- loops over is not a whole number in range (nothing was written).
-- {"shrunk", n, A}: the source is aligned with fewer shards than the
-- ledger's log (A); nothing was written. {"held", n, why}: a provisional
-- term may not open yet (why: the indexes not released, or that the
-- current epoch does not know who serves it); nothing was written.
local r = tonumber(ARGV[1])
local tok = tonumber(ARGV[2])
local k = ARGV[3]
local shards = tonumber(ARGV[4])
local seen = tonumber(ARGV[5])
local aligned = string.sub(ARGV[6], 1, 1) == '1'
local provisional = string.find(ARGV[6], 'p', 1, true) ~= nil
local origin, seenStart, ends = {}, {}, {}
for s = 0, shards - 1 do
  origin[s + 1] = ARGV[7 + s]
  seenStart[s + 1] = ARGV[7 + shards + s]
  ends[s + 1] = ARGV[7 + 2 * shards + s]
end
local rewound = {}
for i = 7 + 3 * shards, #ARGV do rewound[tonumber(ARGV[i])] = true end
-- An epoch of r replicas over n shards has r * n marks: past 1048576
-- (MaxSlots) it is refused before anything is written, never made into
-- a ledger that every later script reads as corrupt.
if r * shards > 1048576 then return {'toolarge', 0, tostring(shards)} end
local anyRewound = next(rewound) ~= nil

local function reply(status, n, why)
  local out = {status, n, why}
  for _, x in ipairs(redis.call('HGETALL', head)) do table.insert(out, x) end
  return out
end
-- The newest holder of index k to open epoch n fences older ones' writes;
-- the index is held until that holder releases it (n:held counts them).
-- It returns ' takeover' when the former opener had not released it
-- (crashed, stalled past its lease, or its last write failed): what that
-- holder finished after its last write may be done again, and the new
-- holder says so (checkpoint.State.TakenOver).
local function stamp(n)
  local f = n .. ':o:' .. k
  local o = tonumber(redis.call('HGET', marksKey, f))
  if not o or o < tok then
    redis.call('HSET', marksKey, f, ARGV[2])
    local rel = tonumber(redis.call('HGET', marksKey, n .. ':rel:' .. k)) or 0
    if not o then redis.call('HINCRBY', head, n .. ':opened', 1) end -- distinct indexes opened (realign.lua)
    if not o or rel >= o then
      redis.call('HINCRBY', head, n .. ':held', 1)
    else
      if tonumber(redis.call('HGET', marksKey, n .. ':rdy:' .. k)) == o then
        redis.call('HINCRBY', head, n .. ':ready', -1) -- the former opener was ready; this one is not
      end
      return ' takeover'
    end
  end
  return ''
end

-- unreleased records, in a new epoch n made by a term that is not
-- provisional from an epoch c that some index never released, which
-- indexes those were (after c's replicas) and each shard's end now: their
-- holders may have finished tasks past their last marks, which n's
-- holders may do again, and say so (checkpoint.Epoch.Unreleased). A term
-- is confirmed (no longer provisional) an interval after the change,
-- when every clean holder of c has drained and released: one that has
-- not crashed, stalled past its lease, or failed its last write. (Found
-- by the fault suite: a holder killed -9 mid-drain at a group's first,
-- unfenced, change, and its last tasks done again unannounced.)
local function unreleased(c, n)
  if provisional or (num(c.n .. ':held') or 0) <= 0 then
    -- Nothing newly unreleased: what c was made with is carried forward
    -- while the epoch it names stays in the history (its skip rule still
    -- reads those marks, so a task of it can still be taken again).
    local prev, of = get(c.n .. ':unreleased'), get(c.n .. ':unrelof')
    if prev and of and inHist(of) then
      local f = {n .. ':unreleased', prev, n .. ':unrelof', of}
      for s = 0, c.shards - 1 do
        local e = get(c.n .. ':rend:' .. s)
        if e then
          table.insert(f, n .. ':rend:' .. s)
          table.insert(f, e)
        end
      end
      redis.call('HSET', head, unpack(f))
    end
    return
  end
  local un = {tostring(c.r)}
  for k0 = 0, c.r - 1, 500 do
    local fs = {}
    for j = k0, math.min(k0 + 499, c.r - 1) do
      table.insert(fs, c.n .. ':o:' .. j)
      table.insert(fs, c.n .. ':rel:' .. j)
    end
    local vs = redis.call('HMGET', marksKey, unpack(fs))
    for i = 1, #vs, 2 do
      local o, rel = tonumber(vs[i]), tonumber(vs[i + 1]) or 0
      if o and rel < o then table.insert(un, tostring(k0 + (i - 1) / 2)) end
    end
  end
  if #un == 1 then return end
  local f = {n .. ':unreleased', table.concat(un, ' '), n .. ':unrelof', tostring(c.n)}
  for s = 0, shards - 1 do
    table.insert(f, n .. ':rend:' .. s)
    table.insert(f, ends[s + 1])
  end
  redis.call('HSET', head, unpack(f))
end

if not get('cur') then
  -- A provisional term never creates a ledger: a new one does not know who
  -- serves (a ledger lost and created again under a live group).
  if provisional then return {'held', 0, 'no ledger: waiting for the lease'} end
  -- No ledger. Marks and Lows without a head are what an earlier ledger
  -- left (its head deleted by hand, say): never read as this one's.
  redis.call('UNLINK', marksKey, lowsKey)
  local starts = {}
  local n, why = 1, ''
  for s = 0, shards - 1 do starts[s + 1] = origin[s + 1] end
  if seen > 0 then
    -- Lost (evicted, flushed, a failover before it replicated): start
    -- again where the worker knows every index had got to, never at the
    -- origin (StartAtEnd would skip what lies between).
    n, why = seen + 1, 'lost'
    for s = 0, shards - 1 do
      if not rewound[s] then starts[s + 1] = seenStart[s + 1] end
    end
  end
  local A = 0
  if aligned then A = shards end
  create(n, r, tok, shards, A, 0, starts, {}, tostring(n), why == 'lost' and 'lost' or 'first')
  stamp(n)
  return reply('new', n, why)
end
local bad = check()
if bad then return corrupt(bad) end
local c = epoch(tonumber(get('cur')))
if r * math.max(shards, c.shards) > 1048576 then return {'toolarge', c.n, tostring(math.max(shards, c.shards))} end
local why = ''
if seen > c.n then why = 'behind' end
if aligned and c.A > 0 and shards < c.A then
  return {'shrunk', c.n, tostring(c.A)}
end

-- What changes: the replicas, a rewound shard, or the alignment (an
-- aligned log that grew shards is aligned to the new count from its end
-- on; a holder that reads it unaligned makes the ledger unaligned, since
-- its marks would not count where it is no owner). Alignment is never
-- adopted by a ledger that began without it: its log may hold entries
-- placed otherwise.
local A = 0
if aligned and c.A > 0 then A = shards end
local grown = c.A > 0 and A > c.A
if c.r == r and not anyRewound and A == c.A then
  if provisional then
    -- Of its mapping already (another provisional term opened it): its
    -- index's newest opener must have released it.
    local o = tonumber(redis.call('HGET', marksKey, c.n .. ':o:' .. k))
    local rel = tonumber(redis.call('HGET', marksKey, c.n .. ':rel:' .. k)) or 0
    if o and rel < o and o ~= tok then return {'held', c.n, 'index ' .. k .. ' not released'} end
  end
  if shards > c.shards then -- an unaligned log grew: new shards start at their origin, read by all
    for s = c.shards, shards - 1 do
      redis.call('HSET', head, c.n .. ':start:' .. s, origin[s + 1], c.n .. ':wait:' .. s, c.r)
    end
    redis.call('HSET', head, c.n .. ':shards', shards)
  end
  why = why .. stamp(c.n)
  gcStep(256)
  return reply('ok', c.n, why)
end
local ctok = num(c.n .. ':tok') or 0
if c.r ~= r and tok <= ctok then
  return {'stale', c.n, c.r .. ' ' .. ctok}
end
if provisional then
  -- The fenced handoff: the next epoch starts from the final marks of
  -- every index of this one, so every index must have been released, and
  -- this epoch must know who serves it (one created for new replicas).
  if get(c.n .. ':fence') ~= '1' then return {'held', c.n, 'epoch ' .. c.n .. ' does not know who serves it'} end
  local held = num(c.n .. ':held') or 0
  if held > 0 then return {'held', c.n, held .. ' of ' .. c.r .. ' indexes not released'} end
end
local was = c.was
if grown then was = c.A end
local because = 'replicas'
if anyRewound then because = 'rewound' elseif grown then because = 'grew' elseif A ~= c.A then because = 'unaligned' end
local n = successor(c, r, tok, math.max(shards, c.shards), A, was, origin, ends, rewound, grown and c.A or 0, false, because)
unreleased(c, n)
if because == 'replicas' then
  -- Format 4: a worker of a version before the fenced handoff refuses the
  -- ledger (v) and serves nothing of it until it is replaced, rather than
  -- open this epoch without being counted among its holders.
  redis.call('HSET', head, n .. ':fence', '1', 'v', '4')
end
why = why .. stamp(n)
gcStep(256)
return reply('new', n, why)
