-- Requeue one domain (requeue_function.lua comes first).
-- KEYS: ready, domain hash, pready.
-- ARGV: domain, now, max_in_flight, budget, release, header size (Limits.requeue_args).
return requeue(KEYS[1], KEYS[3], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[6]), ARGV[5])
