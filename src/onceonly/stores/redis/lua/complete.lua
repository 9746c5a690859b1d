-- complete: mark a lease name done, so acquire refuses it for `keep` ms.
-- KEYS[1]  the lease hash {prefix}:{lease:NAME}
-- ARGV[1]  owner of the grant completing the work
-- ARGV[2]  token of the grant completing the work
-- ARGV[3]  keep in milliseconds (integer > 0)
-- ARGV[4]  '1' to let the record expire when keep ends (one cron tick), '0' to keep it
-- Returns  1 if marked done; 0 if this grant no longer held the name.
-- Race closed: a stale holder marking done work that a newer holder is doing.
-- busy_until doubles as "done until", so acquire needs no second check. The
-- expiry is set to the same instant (PEXPIREAT busy_until), by the same clock:
-- the key cannot vanish while acquire would still refuse the name.
local now = now_ms()
local lease = redis.call('HMGET', KEYS[1], 'owner', 'token', 'completed')
if lease[1] ~= ARGV[1] or lease[2] ~= ARGV[2] or lease[3] == '1' then
    return 0
end
local done_until = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'busy_until', done_until, 'completed', 1)
if ARGV[4] == '1' then
    redis.call('PEXPIREAT', KEYS[1], done_until)
end
return 1
