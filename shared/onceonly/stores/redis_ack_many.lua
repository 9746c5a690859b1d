-- ack_many: remove a batch of claimed items, each only if its claim still holds it.
-- KEYS[1]  {prefix}:{q:QUEUE}:due
-- KEYS[2]  {prefix}:{q:QUEUE}:items
-- KEYS[3]  {prefix}:{q:QUEUE}:inflight
-- ARGV     item_id, token, owner for each claim, in order (3 per claim)
-- Returns  {1 or 0, ...}: one per claim, in the order given (0 = it was
--          re-granted, rescheduled, retried or already removed).
-- Race closed: a stale holder deleting an item that was re-granted after its
-- lease ran out. Token and owner are checked in the same step as the delete,
-- for the whole batch in one round trip.
local acked = {}
for i = 1, #ARGV, 3 do
    local id, token, owner = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
    local raw = redis.call('HGET', KEYS[2], id)
    local item = raw and cjson.decode(raw)
    if item and item.token == token and item.owner == owner then
        redis.call('HDEL', KEYS[2], id)
        redis.call('ZREM', KEYS[1], id)
        redis.call('ZREM', KEYS[3], id)
        table.insert(acked, 1)
    else
        table.insert(acked, 0)
    end
end
return acked
