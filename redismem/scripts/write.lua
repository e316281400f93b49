-- Append one entry (one write) to a session, atomically: messages, entry
-- record, session tags, tag index, counters, trimming and TTLs.
-- KEYS[1..7]   session keys (see _common.lua)
-- ARGV[1]      ttl in ms (0 = never expire)
-- ARGV[2]      max_messages (0 = unbounded)
-- ARGV[3]      session id (unescaped)
-- ARGV[4]      entry record tail (msgpack)
-- ARGV[5]      token count of the entry
-- ARGV[6]      summarization settings "keep_recent,batch,compact" ("" = off)
-- ARGV[7]      T, the number of tag pairs; ARGV[8 .. 7+2T] tag keys and values
-- ARGV[8+2T..] the encoded messages, oldest first
-- Returns {first_seq, created_ms, messages stored in the session, trimmed,
--          pending_since, pending}: pending_since > 0 when this write made the
--          session newly pending summarization (the caller then enqueues its
--          job); pending is 1 while the session is marked pending at all.
local ttl = tonumber(ARGV[1])
local max_messages = tonumber(ARGV[2])
local sid = ARGV[3]
local ntags = tonumber(ARGV[7])
local first_msg = 8 + 2 * ntags
local count = #ARGV - first_msg + 1
local now = now_ms()

-- Prune expired sessions from the user indexes first: when this session
-- itself expired and is being written again, pruning after indexing would
-- drop this write's tags (and pending mark) along with the stale ones.
prune_expired(now)

if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('HSET', KEYS[2], 'created', now, 'seq', 0, 'tokens', 0)
end
local last = redis.call('HINCRBY', KEYS[2], 'seq', count)
local first = last - count + 1
for i = first_msg, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('HINCRBY', KEYS[2], 'tokens', tonumber(ARGV[5]))
redis.call('HSET', KEYS[2], 'accessed', now)
redis.call('RPUSH', KEYS[3], first .. ',' .. now .. ',' .. ARGV[4])

for i = 8, 7 + 2 * ntags, 2 do
  local k, v = ARGV[i], ARGV[i + 1]
  redis.call('HSET', KEYS[4], k, v)
  local pair = lp(k) .. lp(v)
  redis.call('ZADD', KEYS[7], 0, 'f' .. pair .. sid, 0, 'r' .. lp(sid) .. pair)
end

local len = redis.call('LLEN', KEYS[1])
local trimmed = 0
if max_messages > 0 and len > max_messages then
  trimmed = drop_oldest(len - max_messages, last)
  len = len - trimmed
  redis.call('HINCRBY', KEYS[2], 'trimmed', trimmed)
end
local pending_since = mark_pending(last, len, ARGV[6], now, sid)

touch_session(ttl, now, sid)
local pending = 0
if ARGV[6] ~= '' and redis.call('ZSCORE', KEYS[8], sid) then pending = 1 end
return {first, now, len, trimmed, pending_since, pending}
