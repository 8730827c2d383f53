-- One rate policy (requests or tokens per minute) shared by every replica: a token bucket in the
-- hash KEYS[1] = {t = units left, ts = when, in microseconds of Redis' own TIME}. A new bucket is
-- full (the limit); it refills continuously at the limit per minute up to the limit, and may go
-- below zero (tokens are charged after the fact), which later grants wait out: the local
-- limiter's GCRA with a one-minute burst, in the form Redis can hold.
--
-- ARGV[1] the limit per minute
-- ARGV[2] units given back (> 0) or charged (< 0) before granting
-- ARGV[3] units wanted (0: only give back or charge)
-- ARGV[4] share: a grant is at most what is left / share, and at least 1 while 1 is left, so
--         that replicas' leases shrink to single units near the limit
-- Returns {granted, units left (floored), microseconds until 1 unit is left (0 when it is)}.
local limit = tonumber(ARGV[1])
local delta = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local share = tonumber(ARGV[4])
local rate = limit / 60000000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local s = redis.call('HMGET', KEYS[1], 't', 'ts')
local left = tonumber(s[1])
local ts = tonumber(s[2])
if left == nil or ts == nil then
  left = limit
elseif now > ts then
  left = math.min(limit, left + (now - ts) * rate)
end
left = math.min(limit, left + delta)
local grant = 0
if want > 0 and left >= 1 then
  grant = math.min(want, math.max(1, math.floor(left / share)))
  left = left - grant
end
redis.call('HSET', KEYS[1], 't', string.format('%.17g', left), 'ts', string.format('%.17g', now))
-- Kept while it matters: until it would be full again, and a minute more.
redis.call('PEXPIRE', KEYS[1], math.ceil((limit - left) / rate / 1000) + 60000)
local wait = 0
if left < 1 then
  wait = math.ceil((1 - left) / rate)
end
return {grant, math.floor(left), wait}
