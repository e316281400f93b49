-- Clean up after items of a tenant whose TTL has passed: their index
-- entries, namespace counts and refs (their keys expired by themselves).
-- KEYS[1..9]   the tenant's store keys (see store_common.lua)
-- ARGV[1..3]   key prefixes (see store_common.lua)
-- ARGV[4]      most items cleaned up in this call
-- Returns 1 when there may be more to clean up, else 0.
return prune(real_now(), tonumber(ARGV[4]))
