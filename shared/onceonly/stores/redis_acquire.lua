-- acquire: grant a lease name if it is free.
-- KEYS[1]  the lease hash {prefix}:{lease:NAME} (fields owner, token, busy_until ms, completed)
-- ARGV[1]  owner: a random id for this grant
-- ARGV[2]  ttl in milliseconds (integer > 0)
-- Returns  {token, expires_at_ms} when granted; nil when held or completed.
-- Race closed: check-then-set. The busy check and the takeover run as one
-- script, so two callers can never both see the name free. The record is not
-- deleted, so HINCRBY makes the token strictly increase across every
-- grant, including after release and expiry. The clock is the server's (TIME).
-- Only a record completed with expire has a key expiry; once it is gone the
-- token starts again at 1. PERSIST keeps a re-granted record from expiring
-- under its new holder.
local now = now_ms()
local busy_until = tonumber(redis.call('HGET', KEYS[1], 'busy_until'))
if busy_until and busy_until > now then
    return nil
end
local expires_at = now + tonumber(ARGV[2])
local token = redis.call('HINCRBY', KEYS[1], 'token', 1)
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'busy_until', expires_at, 'completed', 0)
redis.call('PERSIST', KEYS[1])
return {token, expires_at}
