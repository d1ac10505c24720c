-- What the ledger's scripts share: redis.go puts it before open.lua,
-- write.lua, realign.lua and head.lua. See docs/PROTOCOL.md, "Checkpoints".
--
-- KEYS[1] {name}:ledger        the head (a hash): v, cur, hist, gc, gcc, and
--                              per epoch n: n:r, n:tok, n:shards, n:aligned,
--                              n:was, n:why, n:reset, n:fence (1: every term
--                              serving it opened it: created for new
--                              replicas, so the fenced handoff may leave it),
--                              n:held (how many of its indexes' newest
--                              openers have not released it), n:ready (how
--                              many of those are ready to hand over); per
--                              shard s:
--                              n:start:s, n:cut:s, n:hi:s, n:wait:s, n:gone:s
-- KEYS[2] {name}:ledger:marks  the marks (a hash): n:s:k = "LOW HIGH TOKEN[
--                              UNDONE...]" (index k's mark in shard s, and
--                              its writer's token), n:o:k = the newest token
--                              that opened epoch n for index k, n:rel:k = the
--                              token that released it (its final marks
--                              written: the fenced handoff), n:rdy:k = the
--                              token that said it is ready to (ready.lua)
-- KEYS[3] {name}:ledger:lows   the Lows (a sorted set, by member): one
--                              member "NNNNNNNNNN:SSSSS:LOW:KKKKK" per mark of
--                              the current epoch that counts toward its
--                              shard's low watermark
--
-- Every script does work bounded by the shards it is given or the epoch's
-- shard count, never by replicas x shards: the low watermark of a shard is
-- the first member of its range in the sorted set (or the start, while an
-- index that counts has no mark: n:wait:s), and an epoch that leaves the
-- history is deleted a few hundred fields per script call (gc).
local head, marksKey, lowsKey = KEYS[1], KEYS[2], KEYS[3]
local POS = 41 -- an encoded position: %020d-%020d

local function get(f) return redis.call('HGET', head, f) end
local function num(f) return tonumber(get(f)) end

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

-- Whether index i of rr can own a task placed in shard s by a producer
-- aligned to A shards (A = 0: not aligned, every index can).
local function canOwn(A, rr, s, i)
  if A == 0 or s >= A then return true end
  local g = gcd(A, rr)
  return s % g == i % g
end

-- How many indexes of rr can own tasks of shard s aligned to A.
local function owners(A, rr, s)
  if A == 0 or s >= A then return rr end
  local g = gcd(A, rr)
  return math.floor((rr - 1 - s % g) / g) + 1
end

-- An epoch's head, as the rules below need it.
local function epoch(n)
  return {n = n, r = num(n .. ':r'), shards = num(n .. ':shards'), A = num(n .. ':aligned') or 0, was = num(n .. ':was') or 0}
end
local function start(n, s) return get(n .. ':start:' .. s) end

-- Whether index k of epoch e counts in shard s with its Low at lo: it can
-- own tasks there, or lo is below the shard's cut (the log grew: what lies
-- below the cut was placed by an older count, and every index reads it).
local function counts(e, s, k, lo)
  if canOwn(e.A, e.r, s, k) then return true end
  local c = get(e.n .. ':cut:' .. s)
  return c and lo < c or false
end

local function member(n, s, k, lo)
  return string.format('%010d:%05d:', n, s) .. lo .. string.format(':%05d', k)
end

-- The low watermark of shard s in epoch n: below it every index that
-- counts there has finished.
local function lowOf(n, s)
  local st = start(n, s)
  if (num(n .. ':wait:' .. s) or 0) > 0 then return st end
  local p = string.format('%010d:%05d:', n, s)
  local first = redis.call('ZRANGEBYLEX', lowsKey, '[' .. p, '(' .. string.format('%010d:%05d;', n, s), 'LIMIT', 0, 1)
  if #first == 0 then return st end
  return string.sub(first[1], #p + 1, #p + POS)
end

-- The highest High written in shard s of epoch n (its start when none).
local function hiOf(n, s) return get(n .. ':hi:' .. s) or start(n, s) end

-- A mark's parts: Low, High and its writer's token.
local function markLow(v) return string.sub(v, 1, POS) end
local function markTok(v) return tonumber(string.match(v, '^(%d+)', 2 * POS + 3)) end

local function inHist(n)
  for h in string.gmatch(get('hist') or '', '%d+') do
    if h == tostring(n) then return true end
  end
  return false
end

-- HDEL or ZREM in chunks (Lua's unpack takes at most a few thousand).
local function delAll(cmd, key, xs)
  for i = 1, #xs, 1000 do
    redis.call(cmd, key, unpack(xs, i, math.min(i + 999, #xs)))
  end
end

-- One step of the garbage collection: the first task of gc, "l:N" (the
-- Lows of epoch N, which is no longer current) or "m:N" (the marks of an
-- epoch that left the history, then its head), at most budget fields.
local function gcStep(budget)
  local gc = get('gc')
  if not gc or gc == '' then return end
  local task, rest = string.match(gc, '^(%S+)%s*(.*)$')
  local kind, h = string.sub(task, 1, 1), string.sub(task, 3)
  local done = false
  if kind == 'l' then
    local n = tonumber(h) or 0
    local ms = redis.call('ZRANGEBYLEX', lowsKey, '[' .. string.format('%010d:', n), '(' .. string.format('%010d;', n), 'LIMIT', 0, budget)
    delAll('ZREM', lowsKey, ms)
    done = #ms < budget
  else
    local hr, hs = num(h .. ':r'), num(h .. ':shards')
    if not hr or not hs or hr < 1 or hs < 1 or hr * hs > 1048576 then
      done = true -- an unreadable head: its fields are left, never looped over
    else
      local at = num('gcc') or 0
      local total = hr * hs + 3 * hr
      local fields = {}
      while at < total and #fields < budget do
        if at < hr * hs then
          table.insert(fields, h .. ':' .. math.floor(at / hr) .. ':' .. (at % hr))
        elseif at < hr * hs + hr then
          table.insert(fields, h .. ':o:' .. (at - hr * hs))
        elseif at < hr * hs + 2 * hr then
          table.insert(fields, h .. ':rel:' .. (at - hr * hs - hr))
        else
          table.insert(fields, h .. ':rdy:' .. (at - hr * hs - 2 * hr))
        end
        at = at + 1
      end
      delAll('HDEL', marksKey, fields)
      if at < total then
        redis.call('HSET', head, 'gcc', at)
      else
        local hf = {}
        for _, x in ipairs({'r', 'tok', 'shards', 'aligned', 'was', 'why', 'reset', 'fence', 'held', 'ready', 'unreleased', 'unrelof', 'opened'}) do table.insert(hf, h .. ':' .. x) end
        for s = 0, hs - 1 do
          for _, x in ipairs({'start', 'cut', 'hi', 'wait', 'gone', 'rend'}) do table.insert(hf, h .. ':' .. x .. ':' .. s) end
        end
        delAll('HDEL', head, hf)
        done = true
      end
    end
  end
  if done then
    redis.call('HSET', head, 'gc', rest)
    redis.call('HDEL', head, 'gcc')
  end
end

-- Creates epoch n and makes it current: r replicas, created by token tok,
-- shards shards aligned to A (was: the count before, for a producer still
-- placing by it), per shard its start and cut (nil: none; only below a
-- start that lies under it), its history histstr, and why it was created.
local function create(n, r, tok, shards, A, was, starts, cuts, histstr, why)
  -- Format 4 once an epoch was created that the fenced handoff may leave
  -- (open.lua): it stays 4.
  local v = '3'
  if get('v') == '4' then v = '4' end
  redis.call('HSET', head, 'v', v, n .. ':r', r, n .. ':tok', tok, n .. ':shards', shards, n .. ':aligned', A,
    n .. ':was', was, n .. ':why', why, 'cur', n, 'hist', histstr)
  for s = 0, shards - 1 do
    local c = cuts[s + 1]
    if c then
      redis.call('HSET', head, n .. ':start:' .. s, starts[s + 1], n .. ':cut:' .. s, c, n .. ':wait:' .. s, r)
    else
      redis.call('HSET', head, n .. ':start:' .. s, starts[s + 1], n .. ':wait:' .. s, owners(A, r, s))
    end
  end
end

-- The counts the scripts loop over (every epoch's replicas and shards)
-- are checked before anything is written: a damaged ledger is refused
-- ("corrupt", naming the field), never looped over a billion times.
local function count(f, max)
  local n = tonumber(get(f))
  if not n or n < 1 or n > max or n % 1 ~= 0 then return nil end
  return n
end
local function check()
  local cur = get('cur')
  if not tonumber(cur) then return 'cur' end
  if get('v') ~= '3' and get('v') ~= '4' then return 'v' end
  if not inHist(cur) then return 'hist' end
  for h in string.gmatch(get('hist') or '', '%d+') do
    if not count(h .. ':r', 65536) then return h .. ':r' end
    if not count(h .. ':shards', 1024) then return h .. ':shards' end
    if count(h .. ':r', 65536) * count(h .. ':shards', 1024) > 1048576 then return h .. ':shards' end
    local al = get(h .. ':aligned')
    if al and al ~= '0' and not count(h .. ':aligned', 1024) then return h .. ':aligned' end
    local was = get(h .. ':was')
    if was and was ~= '0' and not count(h .. ':was', 1024) then return h .. ':was' end
    for s = 0, count(h .. ':shards', 1024) - 1 do
      if not get(h .. ':start:' .. s) then return h .. ':start:' .. s end
    end
  end
  return nil
end
local function corrupt(f) return {'corrupt', 0, f .. ' = ' .. tostring(get(f))} end

-- Creates epoch cur+1 after epoch c (the current one): every shard starts
-- at c's low watermark there (below it every index that counts is done),
-- but a rewound shard (rewound[s]) at origin[s] and a shard c did not have
-- at origin[s]. A is the new epoch's alignment; grownFrom, when the log
-- grew from c's aligned count, takes each old shard's cut from ends (the
-- log's end now: what lies below was placed by the old count), and
-- extend, for a producer still placing by the old count, moves each cut
-- of the old shards up to ends. An older epoch leaves the history once
-- the new starts have passed everything it says is done; c stays when
-- the new epoch has its replicas (its holders drain into it), and its
-- Lows are collected.
-- Whether epoch h stays in the history of a successor of epoch c of r
-- replicas whose shards start at starts (rewound shards aside): it is c,
-- of the same replicas (its holders drain into it), or a High of it lies
-- above the new start.
local function needed(h, c, r, starts, rewound)
  if tonumber(h) == c.n and num(h .. ':r') == r then return true end
  for s = 0, (num(h .. ':shards') or 0) - 1 do
    if not rewound[s] and hiOf(h, s) > starts[s + 1] then return true end
  end
  return false
end

-- MaxHistory (checkpoint.MaxHistory): a realign waits while its epoch
-- would make the history longer.
local maxHistory = 8

local function successor(c, r, tok, shards, A, was, origin, ends, rewound, grownFrom, extend, why, lows)
  local n = c.n + 1
  local starts, cuts = {}, {}
  for s = 0, shards - 1 do
    if rewound[s] then
      starts[s + 1] = origin[s + 1]
    elseif s < c.shards then
      starts[s + 1] = (lows and lows[s + 1]) or lowOf(c.n, s) -- lows: the caller's, read in this call
    else
      starts[s + 1] = origin[s + 1]
    end
    local ct = nil
    if A > 0 and s < A and not rewound[s] then
      local old = get(c.n .. ':cut:' .. s)
      if old and starts[s + 1] < old then ct = old end
      if (grownFrom > 0 and s < grownFrom) or (extend and s < was) then
        if ct == nil or ct < ends[s + 1] then ct = ends[s + 1] end
      end
      if ct and not (starts[s + 1] < ct) then ct = nil end
    end
    cuts[s + 1] = ct
  end
  local kept, gc = {}, {}
  for h in string.gmatch(get('hist') or '', '%d+') do
    local hs = num(h .. ':shards')
    for s = 0, hs - 1 do
      if rewound[s] then
        -- What an older epoch says of a rewound shard is about a log that
        -- is gone: it starts at the origin, and skips nothing there.
        redis.call('HSET', head, h .. ':start:' .. s, origin[s + 1], h .. ':gone:' .. s, '1')
        redis.call('HDEL', head, h .. ':hi:' .. s, h .. ':cut:' .. s)
      end
    end
    if needed(h, c, r, starts, rewound) then
      table.insert(kept, h)
    else
      table.insert(gc, 'm:' .. h)
    end
  end
  table.insert(gc, 1, 'l:' .. c.n)
  table.insert(kept, tostring(n))
  local old = get('gc')
  if old and old ~= '' then table.insert(gc, 1, old) end
  redis.call('HSET', head, 'gc', table.concat(gc, ' '))
  create(n, r, tok, shards, A, was, starts, cuts, table.concat(kept, ' '), why)
  return n
end
