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
