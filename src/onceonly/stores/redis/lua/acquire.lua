-- acquire: grant a lease name if it is free.
-- KEYS[1]  the lease hash {prefix}:{lease:NAME} (fields owner, token, busy_until ms, completed)
-- ARGV[1]  owner: a random id for this grant
-- ARGV[2]  ttl in milliseconds (integer > 0)
-- Returns  {token (decimal string), expires_at_ms, grants} when granted (grants
--          counts the name's grants, this one included; the token no longer
--          does); nil when held or completed.
-- Race closed: check-then-set. The busy check and the takeover run as one
-- script, so two callers can never both see the name free. The record is not
-- deleted, so the token strictly increases across every grant, including after
-- release and expiry; next_token floors it by the server's clock (TIME), so a
-- record lost or restored from an older snapshot never repeats a token handed
-- out before. Only a record completed with expire has a key expiry. PERSIST
-- keeps a re-granted record from expiring under its new holder.
local now = now_ms()
local busy_until = tonumber(redis.call('HGET', KEYS[1], 'busy_until'))
if busy_until and busy_until > now then
    return nil
end
local expires_at = now + tonumber(ARGV[2])
local stored = redis.call('HMGET', KEYS[1], 'token', 'grants')
local token = next_token(stored[1], now)
-- A record written before tokens were floored has no grants field: its token
-- was the count.
local grants = (tonumber(stored[2]) or tonumber(stored[1]) or 0) + 1
redis.call('HSET', KEYS[1], 'token', token, 'grants', grants, 'owner', ARGV[1], 'busy_until', expires_at,
           'completed', 0)
redis.call('PERSIST', KEYS[1])
return {token, expires_at, grants}
