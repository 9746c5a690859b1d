-- return_permit: give a place of a counting semaphore back at once.
-- KEYS[1]  the semaphore's sorted set {prefix}:{sem:NAME}
-- ARGV[1]  holder id of the permit being returned
-- Returns  1 if the permit was held; 0 if it had ended (its ttl ran out) or
--          was returned already.
-- Race closed: a stale holder freeing a place someone else now holds. Only
-- this holder's own member is removed, so a repeated or late return frees no
-- other place; an ended member is removed too (it held nothing any more).
local now = now_ms()
local expires_at = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if not expires_at then
    return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
if expires_at > now then
    return 1
end
return 0
