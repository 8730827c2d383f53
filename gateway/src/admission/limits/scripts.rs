//! The two Redis scripts of the shared store, each one atomic call (Redis runs a script alone).
//! Kept as Rust strings, not `.lua` files, so that every source filter that keeps the crate's
//! Rust sources (crane's included) keeps them.

/// The bucket of one shared rate policy: take a lease, give units back, charge debt.
pub const BUCKET: &str = r#"
-- One rate policy (requests or tokens per minute) shared by every replica: a token bucket in the
-- hash KEYS[1] = {t = units left, ts = when, in microseconds of Redis' own TIME}. A new bucket is
-- full (the limit); it refills continuously at the limit per minute up to the limit, and may go
-- below zero (tokens are charged after the fact), which later grants wait out: the local
-- limiter's GCRA with a one-minute burst, in the form Redis can hold. While it sits full, what
-- would refill is lost to the cap; {ff, ft} keep the last span it sat full, for units owed from
-- that span (ARGV[6]).
--
-- ARGV[1] the limit per minute
-- ARGV[2] units given back (> 0) or charged (< 0) before granting
-- ARGV[3] units wanted (0: only give back or charge)
-- ARGV[4] share: a grant is at most what is left / share, and at least 1 while 1 is left, so
--         that replicas' leases shrink to single units near the limit
-- ARGV[5] the window the limit is per, microseconds (a minute; a spend budget's period)
-- ARGV[6] units the replica admitted while it could not reach Redis (optional, default 0)
-- ARGV[7] how long ago, microseconds, that began (optional): ARGV[6] is charged as of then
-- Returns {granted, units left (floored), microseconds until 1 unit is left (0 when it is)}.
local limit = tonumber(ARGV[1])
local delta = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local share = tonumber(ARGV[4])
local rate = limit / (tonumber(ARGV[5]) or 60000000)
local owed = tonumber(ARGV[6]) or 0
local owed_age = tonumber(ARGV[7]) or 0
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local s = redis.call('HMGET', KEYS[1], 't', 'ts', 'ff', 'ft')
local left = tonumber(s[1])
local ts = tonumber(s[2])
local ff = tonumber(s[3])
local ft = tonumber(s[4])
if left == nil or ts == nil then
  left = limit
  ts = now
  ff = nil
  ft = nil
end
if now > ts then
  local full_at = ts + (limit - left) / rate
  if full_at < now then
    -- Full from full_at to now; a span that went on since the last call keeps its start.
    if not (ft == ts and left >= limit) then
      ff = full_at
    end
    ft = now
  end
  left = math.min(limit, left + (now - ts) * rate)
end
if owed > 0 then
  -- Charged as of the outage's start: what refilled while the bucket sat full since then (lost
  -- to the cap) pays first, so that the replicas' owed units add up to what they admitted
  -- against what refilled, whichever answers first (a GCRA's charge as of a past moment).
  if ff ~= nil and ft ~= nil then
    local from = math.max(ff, now - owed_age)
    if from < ft then
      local paid = math.min(owed, (ft - from) * rate)
      owed = owed - paid
      ff = from + paid / rate
    end
  end
  left = left - owed
end
left = math.min(limit, left + delta)
local grant = 0
if want > 0 and left >= 1 then
  grant = math.min(want, math.max(1, math.floor(left / share)))
  left = left - grant
end
redis.call('HSET', KEYS[1], 't', string.format('%.17g', left), 'ts', string.format('%.17g', now))
if ff ~= nil and ft ~= nil then
  redis.call('HSET', KEYS[1], 'ff', string.format('%.17g', ff), 'ft', string.format('%.17g', ft))
end
-- Kept while it matters: until it would be full again, and a minute more.
redis.call('PEXPIRE', KEYS[1], math.ceil(math.max(0, limit - left) / rate / 1000) + 60000)
local wait = 0
if left < 1 then
  wait = math.ceil((1 - left) / rate)
end
return {grant, math.floor(left), wait}
"#;

/// The slots of one shared max_concurrent policy: state what this holder holds, renew its TTL,
/// free the slots of holders past theirs.
pub const SLOTS: &str = r#"
-- One max_concurrent policy shared by every replica: the hash KEYS[1] holds, per holder (a
-- replica's instance of the policy), "c:<holder>" = slots it holds and "e:<holder>" = when they
-- expire (microseconds of Redis' own TIME). A holder states its own count (absolute, so that a
-- lost answer or a Redis restarted empty is put right by its next call) and renews its expiry;
-- the slots of a holder past its expiry (a replica that died) are freed here.
--
-- ARGV[1] holder
-- ARGV[2] max_concurrent
-- ARGV[3] slots in use by the holder (kept even past the max: they are serving requests)
-- ARGV[4] slots the holder wants to hold in total (in use + spare)
-- ARGV[5] time to live of the holder's slots, microseconds
-- Returns {slots held, slots free for other holders}.
local holder = ARGV[1]
local max = tonumber(ARGV[2])
local in_use = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local ttl = tonumber(ARGV[5])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local all = redis.call('HGETALL', KEYS[1])
local count = {}
local expires = {}
for i = 1, #all, 2 do
  local kind = string.sub(all[i], 1, 2)
  local h = string.sub(all[i], 3)
  if kind == 'c:' then
    count[h] = tonumber(all[i + 1])
  elseif kind == 'e:' then
    expires[h] = tonumber(all[i + 1])
  end
end
local others = 0
for h, c in pairs(count) do
  if h ~= holder then
    local e = expires[h]
    if e == nil or e < now then
      redis.call('HDEL', KEYS[1], 'c:' .. h, 'e:' .. h)
    else
      others = others + c
    end
  end
end
local held = math.max(in_use, math.min(want, max - others))
if held <= 0 then
  held = 0
  redis.call('HDEL', KEYS[1], 'c:' .. holder, 'e:' .. holder)
else
  redis.call('HSET', KEYS[1], 'c:' .. holder, held, 'e:' .. holder, string.format('%.17g', now + ttl))
end
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000) * 2)
return {held, math.max(0, max - others - held)}
"#;
