-- hold_until(): raise a domain's next fetch time (never lower it) and, if it waits in a ready
-- queue, move it there too (XX GT: only if queued, only later).
-- KEYS: domain hash, ready, pready. ARGV: domain, at (ms). Returns 1 when the time moved.
local cur = tonumber(redis.call('HGET', KEYS[1], 'next'))
local at = tonumber(ARGV[2])
if cur ~= nil and cur >= at then return 0 end
redis.call('HSET', KEYS[1], 'next', at)
redis.call('ZADD', KEYS[2], 'XX', 'GT', at, ARGV[1])
redis.call('ZADD', KEYS[3], 'XX', 'GT', at, ARGV[1])
return 1
