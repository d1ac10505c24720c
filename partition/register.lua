-- nandi partition lease: one registration. See docs/PROTOCOL.md and
-- doc.go. Atomic, one round trip.
--
-- KEYS[1]  {name}:lease, a hash holding all of the group's lease state, so
--          that the script touches one declared key and a Redis Cluster
--          slot migration moves the group in one piece:
--            interval_us, gap_ppm  the group's settings
--            tmax_us               the clamped clock (never goes back)
--            nonce                 part of the store generation
--            c:N                   how many registered in interval N
--            t:N:TOKEN             the (1-based) index TOKEN got in N
--            i:N:INDEX             the token that got INDEX (1-based) in N
--            x:N                   the highest INDEX granted in N
--            f:N                   no INDEX below this is free for a newcomer in N
--            low                   no c:/t:/i:/x:/f: field is older than this interval
-- ARGV[1]  interval in microseconds
-- ARGV[2]  gap in parts per million
-- ARGV[3]  token of this registration
-- ARGV[4]  a random value, kept as the group's nonce when there is none
-- ARGV[5]  the interval the registration was aimed at; a registration
--          that arrives after the next one is not counted. -1: a probe of
--          the server's clock (a new worker's first call, which cannot aim
--          yet): answered with the time, never counted. 0: unknown
--          (counted wherever it lands; the lease never sends it)
-- ARGV[6]  the 0-based index this worker got in its last registration (-1: none)
-- ARGV[7]  the token of that registration ("" when none)
--
-- The index: a worker keeps the index it got in N-1 (ARGV[6], proved by
-- the token that got it, ARGV[7]) when it is below the count of N-1 and
-- nobody has it in N yet; any other registration takes the lowest index
-- that nobody got in N-1 nor in N so far. So arrival order decides
-- nothing in a settled group, and each index is granted at most once per
-- interval.
--
-- Replies:
--   {"settings", interval_us, gap_ppm}            the group runs with other settings
--   {"time", N, o, T, gen, count_of_N_minus_1}     outside the window: nothing changed
--   {"ok", n, o, T, gen, index, count_of_n_minus_1} registered in interval n (N or N-1)
if redis.replicate_commands then redis.replicate_commands() end

local key = KEYS[1]
local I = tonumber(ARGV[1])
local gp = tonumber(ARGV[2])
local function fmt(x) return string.format('%.0f', x) end

local s = redis.call('HMGET', key, 'interval_us', 'gap_ppm', 'tmax_us', 'nonce')
if s[1] and (tonumber(s[1]) ~= I or tonumber(s[2]) ~= gp) then
  return {'settings', tonumber(s[1]), tonumber(s[2])}
end

-- Server time, clamped to never go back within the group.
local t = redis.call('TIME')
local T = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tmax = tonumber(s[3])
if tmax and tmax > T then T = tmax end
local N = math.floor(T / I)
local o = T - N * I

-- Generation: changes whenever the store may have lost acknowledged writes.
local nonce = s[4] or ARGV[4]
local gen = nonce
local ok, info = pcall(redis.call, 'INFO', 'server')
if ok and type(info) == 'string' then
  local id = string.match(info, 'run_id:(%w+)')
  if id then gen = gen .. ':' .. id end
end
ok, info = pcall(redis.call, 'INFO', 'replication')
if ok and type(info) == 'string' then
  local id = string.match(info, 'master_replid:(%w+)')
  if id then gen = gen .. ':' .. id end
end

redis.call('HSET', key, 'interval_us', ARGV[1], 'gap_ppm', ARGV[2], 'tmax_us', fmt(T), 'nonce', nonce)
redis.call('PEXPIRE', key, math.ceil(10 * I / 1000))

local function count(m) return tonumber(redis.call('HGET', key, 'c:' .. fmt(m)) or '0') end
local function idle()
  return {'time', N, o, T, gen, count(N - 1)}
end

-- A probe counts nothing, however late it arrives.
if ARGV[5] == '-1' then
  return idle()
end

-- A token registers once: a retry whose first attempt ran returns that.
local tok = ARGV[3]
local n = N
local idx = redis.call('HGET', key, 't:' .. fmt(N) .. ':' .. tok)
if not idx then
  idx = redis.call('HGET', key, 't:' .. fmt(N - 1) .. ':' .. tok)
  n = N - 1
end
if not idx then
  local lo = math.floor(I * gp / 1000000)
  if o < lo or o > I - lo then
    return idle()
  end
  -- Delayed by more than an interval (in the network, or a client's
  -- retry): the lookup above cannot see its first attempt, so it must not
  -- count again.
  local aimed = tonumber(ARGV[5] or '0')
  if aimed > 0 and N > aimed + 1 then
    return idle()
  end
  n = N
  local c = redis.call('HINCRBY', key, 'c:' .. fmt(N), 1)
  local function granted(m, x) return redis.call('HEXISTS', key, 'i:' .. fmt(m) .. ':' .. fmt(x)) == 1 end
  local want = tonumber(ARGV[6] or '-1') + 1
  if want >= 1 and want <= count(N - 1) and not granted(N, want)
      and redis.call('HGET', key, 'i:' .. fmt(N - 1) .. ':' .. fmt(want)) == ARGV[7] then
    idx = want
  else
    local f = tonumber(redis.call('HGET', key, 'f:' .. fmt(N)) or '1')
    while granted(N, f) or granted(N - 1, f) do f = f + 1 end
    idx = f
    redis.call('HSET', key, 'f:' .. fmt(N), fmt(f + 1))
  end
  redis.call('HSET', key, 't:' .. fmt(N) .. ':' .. tok, idx, 'i:' .. fmt(N) .. ':' .. fmt(idx), tok)
  if idx > tonumber(redis.call('HGET', key, 'x:' .. fmt(N)) or '0') then
    redis.call('HSET', key, 'x:' .. fmt(N), fmt(idx))
  end
  if c == 1 then
    -- The first registration of N forgets every interval before N-2 (a
    -- registration reads the counts of N-1 and N-2 and the tokens of N
    -- and N-1 only).
    local keep = N - 2
    local low = tonumber(redis.call('HGET', key, 'low') or fmt(keep))
    if keep - low > 16 then
      -- After a long idle: sweep by field instead of by interval.
      local fields = redis.call('HKEYS', key)
      for _, f in ipairs(fields) do
        local m = tonumber(string.match(f, '^[ctixf]:(%d+)'))
        if m and m < keep then redis.call('HDEL', key, f) end
      end
    else
      for m = low, keep - 1 do
        local top = tonumber(redis.call('HGET', key, 'x:' .. fmt(m)) or '0')
        for x = 1, top do
          local it = 'i:' .. fmt(m) .. ':' .. fmt(x)
          local t = redis.call('HGET', key, it)
          if t then redis.call('HDEL', key, 't:' .. fmt(m) .. ':' .. t) end
          redis.call('HDEL', key, it)
        end
        redis.call('HDEL', key, 'c:' .. fmt(m), 'x:' .. fmt(m), 'f:' .. fmt(m))
      end
    end
    redis.call('HSET', key, 'low', fmt(keep))
  end
end
return {'ok', n, o, T, gen, tonumber(idx) - 1, count(n - 1)}
