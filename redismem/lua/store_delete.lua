-- Delete one item of the long-term store, atomically: its current version
-- goes into the history followed by a tombstone; it leaves the indexes.
-- Idempotent per write id. Deleting a missing item records nothing.
-- include: _store
-- KEYS[1..9]   the tenant's store keys (see _store.lua)
-- KEYS[10]     the item's key   KEYS[11] its history
-- ARGV[1..3]   key prefixes (see _store.lua)
-- ARGV[4]      the item ref
-- ARGV[5]      write id
-- ARGV[6]      the tombstone's payload (msgpack)
-- Returns 1 when an item was deleted (by this write id), else 0.
local ref, op = ARGV[4], ARGV[5]

local seen = redis.call('HGET', KEYS[8], op)
if seen then return tonumber(seen) end

prune(now_ms(), PRUNE_BATCH)
settle(ref)
local old = redis.call('GET', KEYS[10])
if not old then
  drop_if_empty()
  remember_op(op, '0', now_ms())
  return 0
end

local now = clock()
local v, c = parse_record(old)
redis.call('RPUSH', KEYS[11], old, (v + 1) .. ',' .. c .. ',' .. now .. ',d,' .. ARGV[6])
redis.call('DEL', KEYS[10])
drop_live(ref)
local deadline = redis.call('ZSCORE', KEYS[3], ref)
if deadline then redis.call('PEXPIREAT', KEYS[11], deadline) end
remember_op(op, '1', now)
return 1
