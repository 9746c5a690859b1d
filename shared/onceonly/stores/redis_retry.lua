-- retry: put a claimed item back for a new due time, if the claim still holds it.
-- KEYS[1]  {prefix}:{q:QUEUE}:due
-- KEYS[2]  {prefix}:{q:QUEUE}:items
-- KEYS[3]  {prefix}:{q:QUEUE}:inflight
-- ARGV[1]  item_id
-- ARGV[2]  token of the claim
-- ARGV[3]  owner of the claim
-- ARGV[4]  due_at in epoch ms
-- Returns  1 if rescheduled; 0 if the claim no longer held the item.
-- Race closed: a stale holder rescheduling an item that a newer holder is
-- working on. The owner is cleared so a second retry (or an ack) is refused;
-- attempt is kept so the next claim counts on from it.
local raw = redis.call('HGET', KEYS[2], ARGV[1])
local item = raw and cjson.decode(raw)
if not (item and item.token == tonumber(ARGV[2]) and item.owner == ARGV[3]) then
    return 0
end
item.owner = nil
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(item))
redis.call('ZADD', KEYS[1], tonumber(ARGV[4]), ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
