-- depth: counts of due, scheduled and in-flight items of a queue.
-- KEYS[1]  {prefix}:{q:QUEUE}:due
-- KEYS[2]  {prefix}:{q:QUEUE}:inflight
-- ARGV     none
-- Returns  {due, scheduled, in_flight}
-- Race closed: counts taken at different instants that do not add up; all
-- three come from one clock reading in one step. An item whose lease ran out
-- counts as due (its score passed), not as in flight.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZCOUNT', KEYS[1], '-inf', now)
local waiting = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
local in_flight = redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')
return {due, waiting - in_flight, in_flight}
