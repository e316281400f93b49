-- Clean up after items of a tenant whose TTL has passed: their index
-- entries, namespace counts and refs (their keys expired by themselves).
-- include: _store
-- KEYS[1..9]   the tenant's store keys (see _store.lua)
-- ARGV[1..3]   key prefixes (see _store.lua)
-- ARGV[4]      most items cleaned up in this call
-- Returns 1 when there may be more to clean up, else 0.
return prune(now_ms(), tonumber(ARGV[4]))
