-- Append one entry (one write) to a session, atomically: messages, entry
-- record, session tags, tag index, counters, trimming and TTLs. Idempotent
-- per write id: a re-send of the same write (redis-py after a timeout or a
-- reset connection, or a caller retrying a failed write) changes nothing and
-- returns the first result.
-- include: _common
-- KEYS[1..9]   session keys (see _common.lua)
-- ARGV[1]      ttl in ms (0 = never expire)
-- ARGV[2]      max_messages (0 = unbounded)
-- ARGV[3]      session id (unescaped)
-- ARGV[4]      entry record tail (msgpack)
-- ARGV[5]      token count of the entry
-- ARGV[6]      summarization settings "keep_recent,batch,compact" ("" = off)
-- ARGV[7]      write id (unique per write() call)
-- ARGV[8]      recall ttl in ms for the recall index ("" = indexing off,
--              "0" = keep forever): with indexing on, every write makes the
--              session due for the workers
-- ARGV[9]      the entry's time in ms, for a write recording what happened
--              earlier ("" = now; a later time counts as now)
-- ARGV[10]     T, the number of tag pairs; ARGV[11 .. 10+2T] tag keys and values
-- ARGV[11+2T..] the encoded messages, oldest first
-- Returns {first_seq, created_ms, messages stored in the session, trimmed,
--          pending_since, pending, duplicate}: pending_since > 0 when this
--          write made the session newly pending summarization (the caller then
--          enqueues its job); pending is 1 while the session is marked pending
--          at all; duplicate is 1 when the write id was already applied (the
--          first two fields are then those of the first application).
-- Errors: REDISMEM_CORRUPT when the session's keys were evicted apart.
local ttl = tonumber(ARGV[1])
local max_messages = tonumber(ARGV[2])
local sid = ARGV[3]
local write_id = ARGV[7]
local recall_ttl = ARGV[8]
local ntags = tonumber(ARGV[10])
local first_msg = 11 + 2 * ntags
local count = #ARGV - first_msg + 1

local meta = load_meta(KEYS[2])
-- The messages stored, as meta counts them. Whether the session's keys agree
-- (they disagree when some were evicted or deleted apart) is checked from
-- the replies of the pushes below, which undo exactly what this write did
-- when they do not: no LLEN msgs nor TYPE entries before.
local len = meta and meta.seq - meta.dropped or 0

local marking = ARGV[6] ~= '' or recall_ttl ~= ''

local now = now_ms()
-- The lists are (re)created when empty, so their keys need a TTL then too.
local touching = len == 0 or needs_touch(ttl, now, meta and meta.exp)
-- The meta hash (read above), the write ids (written first), the messages
-- and the entry records (pushed next, undone on a wrong type) fail before
-- anything else is written; the others this write will touch are checked
-- here (`touched`: none on the hot path, so no table then).
local touched = nil
if ntags > 0 or touching then
  touched = {}
  if ntags > 0 then touched[4], touched[8] = 'hash', 'zset' end
  if touching then touched[7], touched[8], touched[9] = 'zset', 'zset', 'zset' end
end
-- Whether the session is marked pending: ZSCORE reads it and, failing on a
-- key of another type, checks the key's type too (TYPE only then, for the
-- error). Most writes find the mark and need not write it again.
local marked = false
if marking then
  marked = redis.pcall('ZSCORE', KEYS[9], sid)
  if type(marked) == 'table' then
    touched = touched or {}
    touched[9], marked = 'zset', false
  end
end
if touched then
  local broken = type_error(touched)
  if broken then return broken end
end
-- The entry's time; TTLs, the access time and the pending mark keep `now`.
-- Lua formats a number each time it meets a string (a command argument, a
-- concatenation): the numbers written are formatted once, here (`_s`).
local at, now_s = now, tostring(now)
local at_s = now_s
if ARGV[9] ~= '' then
  at = math.min(tonumber(ARGV[9]), now)
  at_s = tostring(at)
end
local first = (meta and meta.seq or 0) + 1
local writes = (meta and meta.writes or 0) + 1
local first_s, writes_s = tostring(first), tostring(writes)
local seen = remember_write(write_id, first_s .. ',' .. at_s .. ',' .. writes_s)
if seen then
  local applied, created = string.match(seen, '^(%d+),(%d+)')
  return {tonumber(applied), tonumber(created), len, 0, 0, marked and 1 or 0, 1}
end

-- The message(s) and the entry record, pushed through redis.pcall: RPUSH
-- answers the list's new length, which tells whether the keys agree with
-- meta (they disagree when some were evicted or deleted apart). When they do
-- not, or a key has another type, the pushes and the write id are taken
-- back, leaving every key as it was, and the write fails as the integrity
-- check of the other scripts (integrity_error) would; messages of another
-- type fail it with Redis's own error, as LLEN did before writing.
local batch = count
if count > 1000 then batch = 1000 end
local pushed
if count == 1 then
  pushed = redis.pcall('RPUSH', KEYS[1], ARGV[first_msg])
else
  pushed = redis.pcall('RPUSH', KEYS[1], unpack(ARGV, first_msg, first_msg + batch - 1))
end
local failure, popped, record = nil, 0, nil
if type(pushed) == 'table' then
  failure = 'msgs'
elseif pushed ~= len + batch then
  failure, popped = 'msgs', batch
else
  popped = batch
  record = redis.pcall('RPUSH', KEYS[3], first_s .. ',' .. at_s .. ',' .. ARGV[4])
  if type(record) == 'table' or (meta == nil and record ~= 1) or (record == 1 and len > 0) then
    failure = 'entries'
  end
end
if failure then
  if type(record) == 'number' then redis.call('RPOP', KEYS[3]) end
  if popped > 0 then redis.call('RPOP', KEYS[1], popped) end
  redis.call('HDEL', KEYS[6], write_id)
  if type(pushed) == 'table' then
    return pushed
  elseif meta == nil then
    return corrupt(KEYS[2], 'session meta is missing while its messages exist')
  elseif failure == 'msgs' then
    return corrupt(KEYS[1], 'holds ' .. (pushed - batch) .. ' messages where meta counts ' .. len)
  elseif type(record) == 'table' then
    return corrupt(KEYS[3], 'is a ' .. redis.call('TYPE', KEYS[3])['ok'] .. ', not a list')
  end
  return corrupt(KEYS[3], 'entry records are missing while messages exist')
end
for i = first_msg + batch, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
forget_old_writes(writes)

-- Prune expired sessions from the user indexes when the TTLs slide (a new
-- session, or once per slack period of a busy one: readers skip expired
-- members anyway), and first: when this session itself expired and is being
-- written again, pruning after indexing would drop this write's tags (and
-- pending mark) along with the stale ones.
if touching then
  prune_expired(now)
  marked = false  -- pruning may have dropped this session's mark: look again
end

if meta == nil then
  -- A new incarnation: `gen` tells it apart from an earlier session of the
  -- same id (cleared or expired), so a job started on that one cannot commit.
  redis.call('HSET', KEYS[2], 'created', at_s, 'gen', write_id)
  meta = {seq = 0, dropped = 0, tokens = 0, writes = 0, wm = 0, iwm = 0}
end
local last = first + count - 1
local last_s = count == 1 and first_s or tostring(last)
redis.call('HSET', KEYS[2], 'seq', last_s, 'tokens', meta.tokens + tonumber(ARGV[5]),
  'writes', writes_s, 'accessed', now_s)

local indexed = 0
for i = 11, 10 + 2 * ntags, 2 do
  local k, v = ARGV[i], ARGV[i + 1]
  redis.call('HSET', KEYS[4], k, v)
  local pair = lp(k) .. lp(v)
  indexed = indexed + redis.call('ZADD', KEYS[8], 0, 'f' .. pair .. sid, 0, 'r' .. lp(sid) .. pair)
end

len = len + count
local trimmed = 0
if max_messages > 0 and len > max_messages then
  local drop = len - max_messages
  if recall_ttl ~= '' then count_unindexed(drop, last - len + 1, meta.iwm) end
  trimmed = drop_oldest(drop, last)
  len = len - trimmed
  redis.call('HINCRBY', KEYS[2], 'trimmed', trimmed)
end
if recall_ttl ~= '' and meta.rttl ~= recall_ttl then redis.call('HSET', KEYS[2], 'rttl', recall_ttl) end
local pending_since, pending = 0, 1
if not marked then
  pending_since, pending = mark_pending(last, len, meta.wm, ARGV[6], recall_ttl ~= '', now, sid)
end

if touching then
  touch_session(ttl, now, sid, nil)
else
  -- Keys this write may have created get the session's deadline.
  if ntags > 0 and meta.exp ~= 'inf' then redis.call('PEXPIREAT', KEYS[4], tonumber(meta.exp)) end
  if indexed > 0 or pending_since > 0 then fit_user_ttl() end
end
if pending == nil then
  pending = 0
  if marking and redis.call('ZSCORE', KEYS[9], sid) then pending = 1 end
end
return {first, at, len, trimmed, pending_since, pending, 0}
