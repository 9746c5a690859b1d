-- depth: counts of due, scheduled and in-flight items of a queue.
-- KEYS[1]  {prefix}:{q:QUEUE}:sched  (waiting items below HELD, held ones above)
-- ARGV     none
-- Returns  {due, scheduled, in_flight}
-- Race closed: counts taken at different instants that do not add up; all
-- three come from one clock reading in one step. An item whose lease ran out
-- counts as due, not as in flight. Scores are whole ms, so "after now" is now + 1.
local now = now_ms()
local due = redis.call('ZCOUNT', KEYS[1], '-inf', now) + redis.call('ZCOUNT', KEYS[1], HELD, HELD + now)
local scheduled = redis.call('ZCOUNT', KEYS[1], now + 1, HELD - 1)
local in_flight = redis.call('ZCOUNT', KEYS[1], HELD + now + 1, '+inf')
return {due, scheduled, in_flight}
