-- A holder of an aligned log read a task in a shard its id does not
-- belong to, past the shard's cut: the producers do not place as the log
-- says. Atomically, before the holder's marks pass that task, the ledger
-- moves to the next epoch, of the same replicas: with kind "late" (the id
-- belongs there by the count before the log grew: a producer still places
-- by it) every old shard's cut moves up to its end now, so that every
-- index reads what lies below; with kind "misaligned" (it belongs there by
-- no count) the new epoch is not aligned: every index reads every shard.
-- Either way it starts at the current epoch's low watermarks, which the
-- holder's marks have not passed, and the group's holders drain into the
-- old epoch and open the new one (their writes answer "late"). See
-- docs/PROTOCOL.md, "Checkpoints", and common.lua (before this).
--
-- ARGV[1] the holder's epoch, ARGV[2] its token, ARGV[3] its replicas,
-- ARGV[4] "late" or "misaligned", ARGV[5] what was found (shard,
-- position, key: for people), ARGV[6 ..] each shard's end now.
--
-- Replies {"new", n} or {"moved", cur, its replicas} (the epoch moved on
-- already: the holder opens again, and looks again), {"wait", cur,
-- opened} when an index of the current epoch has not opened it yet
-- (nothing written: the holder tries again), or {"corrupt", 0, "field =
-- value"}.
--
-- Why wait: a holder learns of a new epoch only when it writes (or its
-- writer's idle touch, once an interval), and goes on serving its own
-- until then. A realign made while one has not opened the current epoch
-- would leave it two epochs behind, and the next could drop its epoch
-- from the history while it still has marks to write there: moved, its
-- work since its last write done again, with no fault. Waiting keeps
-- every holder within one epoch of the current one (whose predecessor a
-- successor always keeps), and coalesces realigns: however fast late
-- entries come, an epoch is made no faster than every index opens the
-- last (checkpoint/model/grow.pml, BUG_EAGER). A realign waits as well
-- while its epoch would make the history hold more than maxHistory
-- epochs: the history is bounded whatever the rate of late entries.
local e, tok, r, kind = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local cur = get('cur')
if not cur then return {'moved', '0', '0'} end
local bad = check()
if bad then return corrupt(bad) end
local c = epoch(tonumber(cur))
if cur ~= e or c.r ~= r then return {'moved', cur, tostring(c.r)} end
if c.A == 0 then return {'moved', cur, tostring(c.r)} end -- not aligned (any more): nothing to correct
local opened = num(c.n .. ':opened')
if not opened then
  -- An epoch made before n:opened was kept: count its openers' stamps.
  opened = 0
  for k0 = 0, c.r - 1, 500 do
    local fs = {}
    for j = k0, math.min(k0 + 499, c.r - 1) do table.insert(fs, c.n .. ':o:' .. j) end
    for _, v in ipairs(redis.call('HMGET', marksKey, unpack(fs))) do
      if v then opened = opened + 1 end
    end
  end
end
if opened < c.r then return {'wait', cur, 'only ' .. opened .. ' of ' .. c.r .. ' indexes opened it'} end
-- The history a successor would keep: past maxHistory the realign waits
-- too, until the holders' marks move the low watermarks up (their
-- writer's touch writes every mark once an interval).
local starts, kept = {}, 1
for s = 0, c.shards - 1 do starts[s + 1] = lowOf(c.n, s) end
for h in string.gmatch(get('hist') or '', '%d+') do
  if needed(h, c, r, starts, {}) then kept = kept + 1 end
end
if kept > maxHistory then return {'wait', cur, 'the history would hold ' .. kept .. ' epochs'} end
local ends = {}
for s = 0, c.shards - 1 do ends[s + 1] = ARGV[6 + s] or start(c.n, s) end
local A, extend = c.A, kind == 'late'
if not extend then A = 0 end
redis.call('HSET', head, 'misplaced', ARGV[5])
local n = successor(c, r, tok, c.shards, A, c.was, ends, ends, {}, 0, extend, kind, starts)
gcStep(256)
return {'new', n}
