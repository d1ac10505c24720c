-- Writes one holder's checkpoints, fenced by epoch and by lease token.
-- See docs/PROTOCOL.md, "Checkpoints", and common.lua (before this).
--
-- ARGV[1]  epoch, ARGV[2] token, ARGV[3] index k, ARGV[4] replicas r of the
--          writer's lease ("0": not checked; followed by "r" when these are
--          the term's final marks and it releases the index: the fenced
--          handoff), then per shard four values: shard, low, high, undone
--          (encoded; "" for none)
--
-- Replies {"ok"}; {"late", cur, its replicas} when the epoch is no longer
-- current but its successor has the same replicas and it is still in the
-- history (the log grew, or was found misaligned, under the holder: its
-- marks are applied, and it opens again); {"moved", cur, its replicas}
-- when the epoch is no longer current otherwise, or is of another mapping
-- (a ledger lost and created again reuses epoch numbers: checkpoint/model
-- found a former holder's late write landing in an epoch of other
-- replicas); {"fenced", tok} when a newer holder of k has opened or
-- written in this epoch; {"badshard", s} for a shard the epoch does not
-- have. Every check is made before the first write. A shard whose low
-- would go below what is stored keeps what is stored: a checkpoint never
-- goes backwards within an epoch.
local e = ARGV[1]
local tok = tonumber(ARGV[2])
local k = tonumber(ARGV[3])
local r = ARGV[4]
local release = string.sub(r, -1) == 'r'
if release then r = string.sub(r, 1, -2) end
local cur = get('cur')
if not cur then return {'moved', '0', '0'} end
local rc = get(cur .. ':r')
local late = false
if cur ~= e then
  if r == '0' or rc ~= r or get(e .. ':r') ~= r or not inHist(e) then
    return {'moved', cur, rc or '0'}
  end
  late = true
elseif r ~= '0' and rc ~= r then
  return {'moved', cur, rc or '0'}
end
local ep = epoch(tonumber(e))
local o = redis.call('HGET', marksKey, e .. ':o:' .. k)
if o and tonumber(o) > tok then
  return {'fenced', o}
end
local olds = {}
for i = 5, #ARGV, 4 do
  local s = tonumber(ARGV[i])
  if not s or s < 0 or s >= ep.shards or s % 1 ~= 0 then return {'badshard', ARGV[i]} end
  local v = redis.call('HGET', marksKey, e .. ':' .. s .. ':' .. k)
  if v then
    local pt = markTok(v)
    if pt and pt > tok then return {'fenced', tostring(pt)} end
  end
  olds[i] = v or false
end
for i = 5, #ARGV, 4 do
  local s = tonumber(ARGV[i])
  local lo, hi, und = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local old = olds[i] and markLow(olds[i])
  if not get(e .. ':gone:' .. s) and (not old or lo >= old) then
    local v = lo .. ' ' .. hi .. ' ' .. ARGV[2]
    if und ~= '' then v = v .. ' ' .. und end
    redis.call('HSET', marksKey, e .. ':' .. s .. ':' .. k, v)
    if hi > (get(e .. ':hi:' .. s) or '') then redis.call('HSET', head, e .. ':hi:' .. s, hi) end
    if not late then
      -- The shard's low watermark: the mark leaves the sorted set at its
      -- old Low (or the count of those still to write) and enters it at
      -- its new one, when it counts there.
      if counts(ep, s, k, old or start(e, s)) then
        if old then
          redis.call('ZREM', lowsKey, member(ep.n, s, k, old))
        elseif (num(e .. ':wait:' .. s) or 0) > 0 then
          redis.call('HINCRBY', head, e .. ':wait:' .. s, -1)
        end
      end
      if counts(ep, s, k, lo) then
        redis.call('ZADD', lowsKey, 0, member(ep.n, s, k, lo))
      end
    end
  end
end
-- The release, with the final marks: only by the index's newest opener
-- (a former holder's release releases nothing).
if release and not late and o and tonumber(o) == tok then
  local relf = e .. ':rel:' .. k
  local rel = tonumber(redis.call('HGET', marksKey, relf)) or 0
  if rel < tok then
    redis.call('HSET', marksKey, relf, ARGV[2])
    redis.call('HINCRBY', head, e .. ':held', -1)
    if tonumber(redis.call('HGET', marksKey, e .. ':rdy:' .. k)) == tok then
      redis.call('HINCRBY', head, e .. ':ready', -1) -- held and ready no more
    end
  end
end
gcStep(256)
if late then return {'late', cur, rc} end
return {'ok'}
