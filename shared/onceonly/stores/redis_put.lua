-- put: schedule (or reschedule) an item of a due queue.
-- KEYS[1]  {prefix}:{q:QUEUE}:due       sorted set, score = claimable-at ms
-- KEYS[2]  {prefix}:{q:QUEUE}:items     hash item_id -> cjson {payload, token, attempt, owner}
-- KEYS[3]  {prefix}:{q:QUEUE}:inflight  sorted set of leased items, score = lease expiry ms
-- ARGV[1]  item_id
-- ARGV[2]  payload as JSON text
-- ARGV[3]  due_at in epoch ms, or '' for now (the server's clock)
-- Returns  1
-- Race closed: a holder acking or retrying an item that was rescheduled under
-- it. The owner is cleared together with the new due time, so the holder's
-- ack/retry are refused; token and attempt are kept, so the next grant's token
-- is still higher.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due_at = now
if ARGV[3] ~= '' then
    due_at = tonumber(ARGV[3])
end
local raw = redis.call('HGET', KEYS[2], ARGV[1])
local item = {token = 0, attempt = 0}
if raw then
    item = cjson.decode(raw)
end
item.payload = ARGV[2]
item.owner = nil
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(item))
redis.call('ZADD', KEYS[1], due_at, ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
