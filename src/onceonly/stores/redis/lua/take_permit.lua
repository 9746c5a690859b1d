-- take_permit: take one place of a counting semaphore if fewer than limit are held.
-- KEYS[1]  the semaphore's sorted set {prefix}:{sem:NAME}: member = holder id,
--          score = the holder's expiry (ms, server clock)
-- ARGV[1]  holder: a random id for this permit
-- ARGV[2]  limit (integer >= 1), read on every call: a lowered limit admits
--          nobody until the live holders fall below it, a raised one at once
-- ARGV[3]  ttl in milliseconds (integer > 0)
-- Returns  the permit's expires_at_ms when taken; nil when limit permits are held.
-- Race closed: count-then-add. Dropping the ended holders, counting the live
-- ones and adding this one run as one script, so two callers can never both
-- take the last place. A crashed holder's permit ends with its ttl and is
-- dropped here, with no reaper. The key expires with its last holder, so an
-- idle semaphore leaves nothing behind.
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
    return nil
end
local expires_at = now + tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], expires_at, ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
redis.call('PEXPIREAT', KEYS[1], last)
return expires_at
