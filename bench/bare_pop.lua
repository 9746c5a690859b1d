-- The bare Redis pop: take up to ARGV[1] due ids from the sorted set KEYS[1]
-- and remove them, in one script. No lease, no token, no record: an item
-- whose worker dies is gone. The floor onceonly is compared to.
-- KEYS[1]  sorted set scored by due time (ms)
-- ARGV[1]  limit
-- Returns  the ids taken
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
if #ids > 0 then
    redis.call('ZREM', KEYS[1], unpack(ids))
end
return ids
