-- Prepended to every script (scripts.py), unless the store was told
-- to allow eviction: refuses the call before it writes anything when the
-- server's maxmemory-policy may evict keys. Read here, in the same atomic step
-- as the write, because the policy can change on a running server (ElastiCache
-- applies a parameter group's change live): a check made earlier, even a
-- second earlier, could let a grant through on a server that then evicts it.
-- INFO memory works where CONFIG is disabled. Cost: one INFO memory per call,
-- on the server (docs/coordination.md, "Redis: eviction and managed defaults").
-- Returns (error reply): "ONCEONLY_EVICTION <policy>", or "ONCEONLY_EVICTION ?"
-- when INFO does not answer (renamed away).
do
    local info = redis.pcall('INFO', 'memory')
    local policy = type(info) == 'string' and string.match(info, 'maxmemory_policy:([%w%-]+)') or '?'
    if policy ~= 'noeviction' then
        return redis.error_reply('ONCEONLY_EVICTION ' .. policy)
    end
end
