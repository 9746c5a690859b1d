-- common: definitions prepended to every lua/<operation>.lua when it is
-- registered (Redis scripts cannot include one another).
-- KEYS     none of its own
-- ARGV     none of its own
-- Returns  nothing; defines now_ms(), HELD, next_token(), call_chunked(), read_record(), record().
-- Queue layout (two keys per queue, one hash tag):
--   {prefix}:{q:QUEUE}:sched  sorted set, one member per item, score = its one
--                             "claimable at" time in ms: the due time while
--                             waiting, HELD + the lease expiry while held
--   {prefix}:{q:QUEUE}:rec    hash item_id -> "token attempt owner payload"

-- The server's clock, in whole milliseconds.
local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- 2^48 ms, above every due time (at most year 9999, 2.5e14 ms), far below 2^53
-- (exact in Lua's doubles). Held items score HELD + lease expiry, so one sorted
-- set tells waiting from held without a second set to keep in step. Pass these
-- scores to redis.call as numbers: `..` would print them with 14 digits.
local HELD = 281474976710656

-- Fencing tokens are floored by the server's clock: the next token is above
-- the last one stored AND above TIME in ms x 1024. A record restored from an
-- older snapshot, or lost with a restart or a failover, would otherwise hand
-- out tokens again that a live holder still fences with. The clock moves on
-- during any restart, and a name is granted far fewer than 1024 times per ms,
-- so every token handed out before is below the floor afterwards. 1024 x ms
-- stays below 2^53 (exact in Lua's doubles) until the year 2248. Returned as
-- a decimal string: Lua prints big numbers as 1.8e+15, and redis.call too.
local TOKENS_PER_MS = 1024
local function next_token(stored, now)
    return string.format('%d', math.max((tonumber(stored) or 0) + 1, now * TOKENS_PER_MS))
end

-- Arguments per variadic command: Lua's unpack stops at about 8000. Even, so
-- score/member and field/value pairs are never split.
local CHUNK = 1000

-- redis.call(command, key, args...) in chunks; the replies of a reading command
-- (HMGET) joined in order.
local function call_chunked(command, key, args)
    local replies = {}
    for first = 1, #args, CHUNK do
        local reply = redis.call(command, key, unpack(args, first, math.min(first + CHUNK - 1, #args)))
        if type(reply) == 'table' then
            for _, value in ipairs(reply) do
                replies[#replies + 1] = value
            end
        end
    end
    return replies
end

-- An item record: "token attempt owner payload". The owner is '' when the item
-- is not held; the payload is the JSON text as put, copied but never parsed.
-- Returns token and attempt (decimal strings), owner, and where the payload starts.
local function read_record(raw)
    return string.match(raw, '^(%d+) (%d+) (%x*) ()')
end

local function record(token, attempt, owner, payload)
    return token .. ' ' .. attempt .. ' ' .. owner .. ' ' .. payload
end

