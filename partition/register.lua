-- nandi partition lease: one registration (or a probe of the server's clock).
-- See PROTOCOL.md and doc.go. Atomic, one round trip.
--
-- KEYS[1]  {name}:meta, a hash: interval_us, gap_ppm, tmax_us, nonce
-- ARGV[1]  interval in microseconds
-- ARGV[2]  gap in parts per million
-- ARGV[3]  token of this registration ("" with mode "probe")
-- ARGV[4]  a random value, kept as the group's nonce when there is none
-- ARGV[5]  mode: "reg" or "probe"
--
-- Replies:
--   {"settings", interval_us, gap_ppm}            the group runs with other settings
--   {"time", N, o, T, gen, count_of_N_minus_1}     probe, or outside the window: nothing changed
--   {"ok", n, o, T, gen, index, count_of_n_minus_1} registered in interval n (N or N-1)
if redis.replicate_commands then redis.replicate_commands() end

local meta = KEYS[1]
local pre = string.sub(meta, 1, -5) -- "{name}:"
local I = tonumber(ARGV[1])
local gp = tonumber(ARGV[2])
local function fmt(x) return string.format('%.0f', x) end

local s = redis.call('HMGET', meta, 'interval_us', 'gap_ppm', 'tmax_us', 'nonce')
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

redis.call('HSET', meta, 'interval_us', ARGV[1], 'gap_ppm', ARGV[2], 'tmax_us', fmt(T), 'nonce', nonce)
redis.call('PEXPIRE', meta, math.ceil(10 * I / 1000))

local function idle()
  return {'time', N, o, T, gen, tonumber(redis.call('GET', pre .. fmt(N - 1)) or '0')}
end
if ARGV[5] ~= 'reg' then
  return idle()
end

-- A token registers once: a retry whose first attempt ran returns that.
local tok = ARGV[3]
local n = N
local idx = redis.call('HGET', pre .. 'reg:' .. fmt(N), tok)
if not idx then
  idx = redis.call('HGET', pre .. 'reg:' .. fmt(N - 1), tok)
  n = N - 1
end
if not idx then
  local lo = math.floor(I * gp / 1000000)
  if o < lo or o > I - lo then
    return idle()
  end
  n = N
  local ttl = math.ceil(3 * I / 1000)
  local ck = pre .. fmt(N)
  local rk = pre .. 'reg:' .. fmt(N)
  idx = redis.call('INCR', ck)
  redis.call('PEXPIRE', ck, ttl)
  redis.call('HSET', rk, tok, idx)
  redis.call('PEXPIRE', rk, ttl)
end
local c = tonumber(redis.call('GET', pre .. fmt(n - 1)) or '0')
return {'ok', n, o, T, gen, tonumber(idx) - 1, c}
