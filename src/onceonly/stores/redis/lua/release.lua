-- release: give a held lease name back at once.
-- KEYS[1]  the lease hash {prefix}:{lease:NAME}
-- ARGV[1]  owner of the grant being released
-- ARGV[2]  token of the grant being released
-- Returns  1 if released; 0 if this grant no longer held the name.
-- Race closed: a stale holder freeing a name someone else now holds. The owner
-- is cleared so a second release (or a renew after release) is refused; the
-- token stays in the record so the next grant gets a higher one.
local now = now_ms()
local lease = redis.call('HMGET', KEYS[1], 'owner', 'token', 'completed')
if lease[1] ~= ARGV[1] or lease[2] ~= ARGV[2] or lease[3] == '1' then
    return 0
end
redis.call('HSET', KEYS[1], 'busy_until', now)
redis.call('HDEL', KEYS[1], 'owner')
return 1
