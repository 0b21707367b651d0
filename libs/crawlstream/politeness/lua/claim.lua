-- Claim up to ARGV[2] due domains: each leaves its ready queue; those that may send another
-- request get rd=1 (the claim) and infl+1 and are returned with their file state, next fetch
-- time, delay override and lane state, flat: domain, gen, off, size, next, delay, lg, lo, ls,
-- domain, ... (CLAIM_WIDTH values each, in _lua.py). Atomic, so two callers never claim the
-- same domain. Domains whose next URL is in their priority lane (the ``pready`` queue) are taken
-- first, highest lane priority first, then the earliest due; then the others (``ready``) by due
-- time. Operator controls are read here, in the server, so every scheduler honours a change at
-- its next claim (ADR 016): an excluded domain only leaves the queue; an override replaces max
-- in flight and the page budget, and a delay override holds the domain until that long after
-- its last dispatch (``lt``). When the run has a page budget (cs:ctl:crawl) at most
-- limit - used domains are claimed.
-- KEYS: ready, pready, owner.
-- ARGV: now, limit, max_in_flight, budget, domain hash prefix, header size, the caller's owner
-- token ('' = not checked): another token there answers the single value FENCED (_lua.py)
-- and claims nothing (no token at all, after a Redis that lost its data, fences nobody).
local owner = redis.call('GET', KEYS[3])
if ARGV[7] ~= '' and owner and owner ~= ARGV[7] then
  return {'@FENCED@'}
end
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local max_in_flight = tonumber(ARGV[3])
local budget = tonumber(ARGV[4])
local hdr = tonumber(ARGV[6])
local left = nil
local crawl = redis.call('HMGET', '@CRAWL@', 'limit', 'used')
if crawl[1] then
  left = tonumber(crawl[1]) - (tonumber(crawl[2]) or 0)
  if left <= 0 then return {} end
end
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, limit)
local hot = #due
if hot > 1 then
  local lp, pos = {}, {}
  for i, d in ipairs(due) do
    lp[d] = tonumber(redis.call('HGET', ARGV[5] .. d, 'lp')) or 0
    pos[d] = i
  end
  table.sort(due, function(a, b)
    if lp[a] ~= lp[b] then return lp[a] > lp[b] end
    return pos[a] < pos[b]
  end)
end
if hot < limit then
  for _, d in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit - hot)) do
    due[#due + 1] = d
  end
end
local out = {}
local claimed = 0
for i, d in ipairs(due) do
  if left ~= nil and claimed >= left then break end
  local queue = KEYS[1]
  if i <= hot then queue = KEYS[2] end
  redis.call('ZREM', queue, d)
  if redis.call('SISMEMBER', '@EXCLUDED@', d) == 0 then
    local o = redis.call('HMGET', '@OVERRIDE@' .. d, 'delay', 'infl', 'pages')
    local h = ARGV[5] .. d
    local v = redis.call('HMGET', h, 'infl', 'off', 'size', 'pages', 'rd', 'gen', 'next', 'lt', 'lg', 'lo', 'ls')
    local infl = tonumber(v[1]) or 0
    if (not v[5]) and infl < (tonumber(o[2]) or max_in_flight)
        and ((tonumber(v[2]) or hdr) < (tonumber(v[3]) or hdr) or (tonumber(v[10]) or hdr) < (tonumber(v[11]) or hdr))
        and (tonumber(v[4]) or 0) < (tonumber(o[3]) or budget) then
      local hold = nil
      if o[1] and v[8] then hold = tonumber(v[8]) + tonumber(o[1]) end
      if hold ~= nil and now < hold then
        redis.call('ZADD', queue, hold, d)
      else
        redis.call('HSET', h, 'rd', '1', 'infl', infl + 1)
        claimed = claimed + 1
        out[#out + 1] = d
        out[#out + 1] = v[6] or ''
        out[#out + 1] = v[2] or ''
        out[#out + 1] = v[3] or ''
        out[#out + 1] = v[7] or ''
        out[#out + 1] = o[1] or ''
        out[#out + 1] = v[9] or ''
        out[#out + 1] = v[10] or ''
        out[#out + 1] = v[11] or ''
      end
    end
  end
end
if left ~= nil and claimed > 0 then
  redis.call('HINCRBY', '@CRAWL@', 'used', claimed)
end
return out
