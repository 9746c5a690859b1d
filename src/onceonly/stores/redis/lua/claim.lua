-- claim: ack the previous batch, then take up to `limit` items that are due or
-- whose lease ran out (ack_many is this script with limit 0).
-- KEYS[1]  {prefix}:{q:QUEUE}:sched  sorted set, score = claimable-at ms (HELD + expiry while held)
-- KEYS[2]  {prefix}:{q:QUEUE}:rec    hash item_id -> "token attempt owner payload"
-- ARGV[1]  owner: a random id for this batch
-- ARGV[2]  limit (integer >= 0; 0 only acks)
-- ARGV[3]  lease in milliseconds (integer > 0)
-- ARGV[4…] item_id, token, owner of each claim to ack first, in order (3 per claim)
-- Returns  {lease_expires_at_ms, n, ack_1 … ack_n, item_id, record, item_id, record, …}:
--          ack_i is 1 if that claim still held its item and removed it, 0 if the
--          item was re-granted, rescheduled, retried or already removed (also by
--          an earlier entry of the same list); then each claimed item's id and
--          its new record "token attempt owner payload" (2 fields, not 4: the
--          reply is a good part of a claim's cost).
-- Race closed: the field code's ZRANGEBYSCORE-then-ZREM in two round trips,
-- which handed the same item to two workers; and a stale holder deleting an
-- item that was re-granted after its lease ran out. Token and owner are checked
-- in the same step as the delete, and the read and the move of a claim run as
-- one step. An item's score is its due time while waiting and HELD + its lease
-- expiry while held, so a crashed holder's item comes back by itself with no
-- reaper. A grant's token is floored by the server's clock (next_token). Nothing due costs two ZRANGEBYSCOREs.
local now = now_ms()
local limit = tonumber(ARGV[2])
local expires_at = now + tonumber(ARGV[3])

local ack_ids = {}
for i = 4, #ARGV, 3 do
    ack_ids[#ack_ids + 1] = ARGV[i]
end
local result = {expires_at, #ack_ids}
local gone, removed = {}, {}
local records = call_chunked('HMGET', KEYS[2], ack_ids)
for i, id in ipairs(ack_ids) do
    local acked = 0
    if records[i] and not removed[id] then
        local token, _, owner = read_record(records[i])
        if token == ARGV[3 * i + 2] and owner == ARGV[3 * i + 3] then
            acked = 1
            removed[id] = true
            gone[#gone + 1] = id
        end
    end
    result[#result + 1] = acked
end
call_chunked('HDEL', KEYS[2], gone)
call_chunked('ZREM', KEYS[1], gone)

if limit == 0 then
    return result
end
-- Leases that ran out first (due longest ago), then waiting items by due time.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], HELD, HELD + now, 'LIMIT', 0, limit)
if #ids < limit then
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit - #ids)) do
        ids[#ids + 1] = id
    end
end
records = call_chunked('HMGET', KEYS[2], ids)
local fields, scores, orphans = {}, {}, {}
for i, id in ipairs(ids) do
    local token, attempt, _, at
    if records[i] then
        token, attempt, _, at = read_record(records[i])
    end
    if token then
        local granted = record(next_token(token, now), attempt + 1, ARGV[1], string.sub(records[i], at))
        fields[#fields + 1] = id
        fields[#fields + 1] = granted
        scores[#scores + 1] = HELD + expires_at
        scores[#scores + 1] = id
        result[#result + 1] = id
        result[#result + 1] = granted
    else
        -- A schedule entry without a record cannot be claimed; drop it so it
        -- does not block the head of the queue forever.
        orphans[#orphans + 1] = id
    end
end
call_chunked('HSET', KEYS[2], fields)
call_chunked('ZADD', KEYS[1], scores)
call_chunked('ZREM', KEYS[1], orphans)
return result
