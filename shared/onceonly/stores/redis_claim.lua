-- claim: take up to `limit` items that are due or whose lease ran out.
-- KEYS[1]  {prefix}:{q:QUEUE}:due       sorted set, score = claimable-at ms
-- KEYS[2]  {prefix}:{q:QUEUE}:items     hash item_id -> cjson {payload, token, attempt, owner}
-- KEYS[3]  {prefix}:{q:QUEUE}:inflight  sorted set of leased items, score = lease expiry ms
-- ARGV[1]  owner: a random id for this batch
-- ARGV[2]  limit (integer > 0)
-- ARGV[3]  lease in milliseconds (integer > 0)
-- Returns  {lease_expires_at_ms, item_id, payload, token, attempt, item_id, ...};
--          just {lease_expires_at_ms} when nothing is due.
-- Race closed: the field code's ZRANGEBYSCORE-then-ZREM in two round trips,
-- which handed the same item to two workers. Here the read and the move run
-- as one script. An item's score is its due time while waiting and its lease
-- expiry while held, so a crashed holder's item comes back by itself with no
-- reaper. Nothing due costs this one ZRANGEBYSCORE.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires_at = now + tonumber(ARGV[3])
local result = {expires_at}
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
    local raw = redis.call('HGET', KEYS[2], id)
    if raw then
        local item = cjson.decode(raw)
        item.token = item.token + 1
        item.attempt = item.attempt + 1
        item.owner = ARGV[1]
        redis.call('HSET', KEYS[2], id, cjson.encode(item))
        redis.call('ZADD', KEYS[1], expires_at, id)
        redis.call('ZADD', KEYS[3], expires_at, id)
        table.insert(result, id)
        table.insert(result, item.payload)
        table.insert(result, item.token)
        table.insert(result, item.attempt)
    else
        -- A schedule entry without a record cannot be claimed; drop it so it
        -- does not block the head of the queue forever.
        redis.call('ZREM', KEYS[1], id)
        redis.call('ZREM', KEYS[3], id)
    end
end
return result
