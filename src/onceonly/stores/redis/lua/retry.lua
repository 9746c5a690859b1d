-- retry: put a claimed item back for a new due time, if the claim still holds it.
-- KEYS[1]  {prefix}:{q:QUEUE}:sched
-- KEYS[2]  {prefix}:{q:QUEUE}:rec
-- ARGV[1]  item_id
-- ARGV[2]  token of the claim
-- ARGV[3]  owner of the claim
-- ARGV[4]  due_at in epoch ms
-- Returns  1 if rescheduled; 0 if the claim no longer held the item.
-- Race closed: a stale holder rescheduling an item that a newer holder is
-- working on. The owner is cleared so a second retry (or an ack) is refused;
-- attempt is kept so the next claim counts on from it.
local raw = redis.call('HGET', KEYS[2], ARGV[1])
if not raw then
    return 0
end
local token, attempt, owner, at = read_record(raw)
if token ~= ARGV[2] or owner ~= ARGV[3] then
    return 0
end
redis.call('HSET', KEYS[2], ARGV[1], record(token, attempt, '', string.sub(raw, at)))
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[1])
return 1
