-- put: schedule (or reschedule) a batch of items of a due queue (put is a batch of one).
-- KEYS[1]  {prefix}:{q:QUEUE}:sched  sorted set, score = claimable-at ms
-- KEYS[2]  {prefix}:{q:QUEUE}:rec    hash item_id -> "token attempt owner payload"
-- ARGV     item_id, payload as JSON text, due_at in epoch ms or '' for now (the
--          server's clock), for each item, in order (3 per item)
-- Returns  the number of items put (an id listed twice counts twice; the later wins)
-- Race closed: a holder acking or retrying an item that was rescheduled under
-- it. The owner is cleared together with the new due time, so the holder's
-- ack/retry are refused; token and attempt are kept, so the next grant's token
-- is still higher. The whole batch is one step.
local now = now_ms()
local ids = {}
for i = 1, #ARGV, 3 do
    ids[#ids + 1] = ARGV[i]
end
local records = call_chunked('HMGET', KEYS[2], ids)
local fields, scores = {}, {}
for i, id in ipairs(ids) do
    local token, attempt = '0', '0'
    if records[i] then
        token, attempt = read_record(records[i])
    end
    local due_at = now
    if ARGV[3 * i] ~= '' then
        due_at = tonumber(ARGV[3 * i])
    end
    fields[#fields + 1] = id
    fields[#fields + 1] = record(token, attempt, '', ARGV[3 * i - 1])
    scores[#scores + 1] = due_at
    scores[#scores + 1] = id
end
call_chunked('HSET', KEYS[2], fields)
call_chunked('ZADD', KEYS[1], scores)
return #ids
