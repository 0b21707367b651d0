-- requeue(): put a domain in a ready queue at its next fetch time iff it may send a request
-- now or later (not excluded, slot free, unread records, budget left) and nobody holds its
-- claim; else take it out (-2: excluded, its records stay parked in the files). The queue is
-- ``pready`` while its priority lane has unread records (they go first), else ``ready``; the
-- domain leaves the other. ``release`` drops the caller's own claim first.
-- Returns -1 when another caller holds the claim, 1 when queued, 0 when taken out.
-- Prepended to requeue.lua, dispatch.lua and complete.lua (see _lua.py).
local function requeue(ready, pready, h, domain, now, max_in_flight, budget, hdr, release)
  if release == '1' then
    redis.call('HDEL', h, 'rd')
  elseif redis.call('HEXISTS', h, 'rd') == 1 then
    return -1
  end
  if redis.call('SISMEMBER', '@EXCLUDED@', domain) == 1 then
    redis.call('ZREM', ready, domain)
    redis.call('ZREM', pready, domain)
    return -2
  end
  local o = redis.call('HMGET', '@OVERRIDE@' .. domain, 'delay', 'infl', 'pages')
  local v = redis.call('HMGET', h, 'infl', 'off', 'size', 'pages', 'next', 'lt', 'lo', 'ls')
  local infl = tonumber(v[1]) or 0
  if infl < 0 then
    redis.call('HSET', h, 'infl', 0)
    infl = 0
  end
  local lane = (tonumber(v[7]) or hdr) < (tonumber(v[8]) or hdr)
  if infl < (tonumber(o[2]) or tonumber(max_in_flight))
      and (lane or (tonumber(v[2]) or hdr) < (tonumber(v[3]) or hdr))
      and (tonumber(v[4]) or 0) < (tonumber(o[3]) or tonumber(budget)) then
    local at = tonumber(v[5]) or tonumber(now)
    if o[1] and v[6] and tonumber(v[6]) + tonumber(o[1]) > at then
      at = tonumber(v[6]) + tonumber(o[1])
    end
    if lane then
      redis.call('ZADD', pready, at, domain)
      redis.call('ZREM', ready, domain)
    else
      redis.call('ZADD', ready, at, domain)
      redis.call('ZREM', pready, domain)
    end
    return 1
  end
  redis.call('ZREM', ready, domain)
  redis.call('ZREM', pready, domain)
  return 0
end
