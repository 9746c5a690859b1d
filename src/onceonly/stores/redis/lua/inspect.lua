-- inspect: the record of a lease name, for status tools.
-- KEYS[1]  the lease hash {prefix}:{lease:NAME}
-- ARGV     none
-- Returns  {owner or false, token, busy_until_ms, completed (0/1), grants}; nil if the
--          name was never granted.
-- Race closed: none to close (read only); a script so that every operation of
-- the store goes through the same registered, named path.
local lease = redis.call('HMGET', KEYS[1], 'owner', 'token', 'busy_until', 'completed', 'grants')
if not lease[2] then
    return nil
end
-- grants: a record from before tokens were floored counted with its token.
return {lease[1], tonumber(lease[2]), tonumber(lease[3]), tonumber(lease[4]), tonumber(lease[5] or lease[2])}
