-- Record one dispatch (or an empty read) in one atomic step (requeue_function.lua comes first).
-- KEYS: ready, domain hash, inflight, leases, pready.
-- ARGV[1..6] as requeue.lua, then: new offset, next fetch at, ticket field, ticket record
-- ('' = no ticket: give the slot, and the run's page, back), lease deadline, the offset's field
-- ('off', or 'lo' for the lane), the lane's next priority ('' = unchanged).
-- With release (ARGV[5]) = '1' the claim is dropped and the domain requeued in the same step.
local h = KEYS[2]
redis.call('HSET', h, ARGV[12], ARGV[7])
if ARGV[13] ~= '' then
  redis.call('HSET', h, 'lp', ARGV[13])
end
if ARGV[9] ~= '' then
  redis.call('HINCRBY', h, 'pages', 1)
  redis.call('HSET', h, 'next', ARGV[8], 'lt', ARGV[2])
  redis.call('HSET', KEYS[3], ARGV[9], ARGV[10])
  redis.call('ZADD', KEYS[4], ARGV[11], ARGV[9])
else
  redis.call('HINCRBY', h, 'infl', -1)
  if redis.call('EXISTS', '@CRAWL@') == 1 then
    redis.call('HINCRBY', '@CRAWL@', 'used', -1)
  end
end
if ARGV[5] == '1' then
  return requeue(KEYS[1], KEYS[5], h, ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[6]), '1')
end
return 0
