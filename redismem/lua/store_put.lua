-- Put one item of the long-term store, atomically: the new version, the old
-- one into the history, the keyword index, the namespace count and the TTL.
-- Idempotent per write id: a re-send changes nothing and returns the result
-- of the first application.
-- include: _store
-- KEYS[1..9]   the tenant's store keys (see _store.lua)
-- KEYS[10]     the item's key   KEYS[11] its history
-- KEYS[12]     guard: a hash of the tenant whose field `gen` must equal
--              ARGV[10] (any key when ARGV[10] is "")
-- KEYS[13]     another item of the tenant that must be at version ARGV[11]
--              (any key when ARGV[11] is "")
-- KEYS[14..]   the postings of the item's terms, in the order of ARGV[12..]
-- ARGV[1..3]   key prefixes (see _store.lua)
-- ARGV[4]      the item ref
-- ARGV[5]      write id
-- ARGV[6]      ttl in ms (0 = never expires)
-- ARGV[7]      the record payload (msgpack)
-- ARGV[8]      number of indexed terms (BM25 document length)
-- ARGV[9]      "" or the live version the item must be at (0: no live item)
-- ARGV[10]     "" or the `gen` the guard hash must hold (a session's
--              incarnation: a put on behalf of a cleared session is refused)
-- ARGV[11]     "" or the version the item KEYS[13] must be at (0: none):
--              a put that holds only while another item holds still (a
--              memory made current only while its slot still names it)
-- ARGV[12..]   pairs: escaped term, its frequency (none: not searchable)
-- Returns {status, version, created_ms, updated_ms}: status 0 applied, 1 a
-- re-send (the first application's result), -1 refused by ARGV[9] (version
-- is the live one, 0 when none), -2 refused by the guard, -3 refused by
-- ARGV[11] (version is that of KEYS[13]).
local ref, op, ttl = ARGV[4], ARGV[5], tonumber(ARGV[6])

local seen = redis.call('HGET', KEYS[8], op)
if seen then
  local v, c, u = string.match(seen, '^(%d+),(%d+),(%d+)$')
  return {1, tonumber(v), tonumber(c), tonumber(u)}
end
if ARGV[10] ~= '' and redis.call('HGET', KEYS[12], 'gen') ~= ARGV[10] then
  return {-2, 0, 0, 0}
end
if ARGV[11] ~= '' then
  local other = redis.call('GET', KEYS[13])
  local at = 0
  if other then at = parse_record(other) end
  if at ~= tonumber(ARGV[11]) then return {-3, at, 0, 0} end
end

prune(now_ms(), PRUNE_BATCH)  -- first: it drops the clock of an emptied tenant
settle(ref)
local old = redis.call('GET', KEYS[10])
if ARGV[9] ~= '' then
  local live = 0
  if old then live = parse_record(old) end
  if live ~= tonumber(ARGV[9]) then
    drop_if_empty()
    return {-1, live, 0, 0}
  end
end
local now = clock()

local version, created = 1, now
if old then
  local v, c = parse_record(old)
  version, created = v + 1, c
  redis.call('RPUSH', KEYS[11], old)
else
  local last = redis.call('LINDEX', KEYS[11], -1)
  if last then version = parse_record(last) + 1 end
end

unindex(ref)
redis.call('SET', KEYS[10], version .. ',' .. created .. ',' .. now .. ',p,' .. ARGV[7])
index(ref, 12, 14, tonumber(ARGV[8]))
add_live(ref, now)
redis.call('ZADD', KEYS[1], 0, ref)
set_deadline(ref, now, ttl)
remember_op(op, version .. ',' .. created .. ',' .. now, now)
return {0, version, created, now}
