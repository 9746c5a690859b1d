-- renew: extend a held lease to now + ttl.
-- KEYS[1]  the lease hash {prefix}:{lease:NAME}
-- ARGV[1]  owner of the grant being renewed
-- ARGV[2]  token of the grant being renewed
-- ARGV[3]  ttl in milliseconds (integer > 0)
-- Returns  the new expires_at_ms; nil if this grant no longer holds the name
--          (re-granted, released or completed).
-- Race closed: a stale holder extending a lease that was granted to someone
-- else. Owner and token are checked in the same step as the write. A lease that
-- expired but was not re-granted can still be renewed: fencing is by token.
local now = now_ms()
local lease = redis.call('HMGET', KEYS[1], 'owner', 'token', 'completed')
if lease[1] ~= ARGV[1] or lease[2] ~= ARGV[2] or lease[3] == '1' then
    return nil
end
local expires_at = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'busy_until', expires_at)
return expires_at
