-- put_if_absent: put each item of a batch only if the queue holds no item of
-- that id, whatever its state (waiting, due or held by a claimer).
-- KEYS[1]  {prefix}:{q:QUEUE}:sched  sorted set, score = claimable-at ms
-- KEYS[2]  {prefix}:{q:QUEUE}:rec    hash item_id -> "token attempt owner payload"
-- ARGV     item_id, payload as JSON text, due_at in epoch ms or '' for now (the
--          server's clock), for each item, in order (3 per item); each id at most once
-- Returns  one 1 (put) or 0 (already there, left as it is) per item, in order
-- Race closed: a put that reschedules an item a worker has claimed takes it
-- from that worker, and a second worker's claim then runs beside the first.
-- Here an existing item is never touched; the check and the write of the whole
-- batch are one step, so of two racing callers one puts each item.
local now = now_ms()
local results = {}
for i = 1, #ARGV, 3 do
    local id = ARGV[i]
    if redis.call('HEXISTS', KEYS[2], id) == 1 then
        results[#results + 1] = 0
    else
        local due_at = now
        if ARGV[i + 2] ~= '' then
            due_at = tonumber(ARGV[i + 2])
        end
        redis.call('HSET', KEYS[2], id, record('0', '0', '', ARGV[i + 1]))
        redis.call('ZADD', KEYS[1], due_at, id)
        results[#results + 1] = 1
    end
end
return results
