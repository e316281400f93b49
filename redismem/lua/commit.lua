-- Commit a summary with compare-and-set on the session's incarnation and
-- watermark: the new summary, the advanced watermark and (with compaction)
-- the removal of exactly the summarized messages land together, or nothing
-- changes. A session cleared or expired (and maybe written again) since the
-- job read it is another incarnation: the job's summary never reaches it.
-- Idempotent: a re-send finds the watermark moved and changes nothing.
-- include: _common
-- KEYS[1..9]  session keys (see _common.lua)
-- ARGV[1]     expected watermark (the one the job read)
-- ARGV[2]     new watermark: seq of the last summarized message
-- ARGV[3]     number of messages summarized
-- ARGV[4]     the new summary (msgpack)
-- ARGV[5]     "1" to remove the summarized messages from the list
-- ARGV[6]     keep_recent   ARGV[7] summarize_batch   ARGV[8] session id
-- ARGV[9]     pending_since the job observed ("" if none)
-- ARGV[10]    the incarnation (gen) the job read
-- Returns {status, still_pending}: status 1 committed, 0 stale watermark
-- (another run committed first), -1 the session is gone (or another
-- incarnation).
local meta = load_meta(KEYS[2], 'gen', 'xwm', 'xbox')
if meta == nil or meta.gen ~= ARGV[10] then return {-1, 0} end
if meta.wm ~= tonumber(ARGV[1]) then return {0, 1} end
local new_wm = tonumber(ARGV[2])
local seq = meta.seq
local len = redis.call('LLEN', KEYS[1])
if new_wm > seq or new_wm < seq - len then return {0, 1} end
-- With indexing on, a message not yet indexed (nor, once the workers
-- extract memories, extracted) is never summarized away.
local floor = meta.iwm
if meta.xwm then floor = math.min(floor, tonumber(meta.xwm)) end
if meta.rttl and ARGV[5] == '1' and new_wm > floor then return {0, 1} end

redis.call('SET', KEYS[5], ARGV[4])
local pttl = redis.call('PTTL', KEYS[2])
if pttl > 0 then redis.call('PEXPIRE', KEYS[5], pttl) end
redis.call('HSET', KEYS[2], 'wm', new_wm)
redis.call('HINCRBY', KEYS[2], 'summarized', tonumber(ARGV[3]))

if ARGV[5] == '1' then
  local head = seq - len + 1
  len = len - drop_oldest(new_wm - head + 1, seq)
end

local still = 1
-- The mark stays while messages wait for indexing or extraction, or
-- extracted memories wait in the outbox (the job does them next).
local indexed = not meta.rttl or (floor >= seq and not meta.xbox)
if indexed and unsummarized_backlog(seq, len, new_wm, tonumber(ARGV[6])) < tonumber(ARGV[7]) then
  still = 0
  local since = redis.call('ZSCORE', KEYS[9], ARGV[8])
  if since and (ARGV[9] == '' or tonumber(since) == tonumber(ARGV[9])) then
    redis.call('ZREM', KEYS[9], ARGV[8])
  end
end
return {1, still}
