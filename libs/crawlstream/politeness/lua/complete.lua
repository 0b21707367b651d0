-- Close one ticket in one atomic step (requeue_function.lua comes first).
-- KEYS: ready, domain hash, inflight, leases, pready.
-- ARGV[1..6] as requeue.lua, then: ticket field, next fetch at, back-off level, Crawl-delay ms,
-- last response ms, new file size ('' = no retry appended; else the page is refunded),
-- '1' when no page was fetched (the run's page budget gets it back), the size's field
-- ('size', or 'ls' when the URL went back to the lane; the caller's HSET before this call
-- stores the lane's other fields).
local h = KEYS[2]
redis.call('HDEL', KEYS[3], ARGV[7])
redis.call('ZREM', KEYS[4], ARGV[7])
redis.call('HINCRBY', h, 'infl', -1)
redis.call('HSET', h, 'next', ARGV[8], 'bo', ARGV[9], 'cdel', ARGV[10], 'rtt', ARGV[11])
if ARGV[12] ~= '' then
  redis.call('HSET', h, ARGV[14], ARGV[12])
  redis.call('HINCRBY', h, 'pages', -1)
end
if ARGV[13] == '1' and redis.call('EXISTS', '@CRAWL@') == 1 then
  redis.call('HINCRBY', '@CRAWL@', 'used', -1)
end
return requeue(KEYS[1], KEYS[5], h, ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[6]), '0')
