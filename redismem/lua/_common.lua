-- The session scripts' shared helpers (scripts that work on one session
-- include this file).
-- include: _time _meta
-- Session scripts take the same KEYS:
--   KEYS[1] msgs  KEYS[2] meta  KEYS[3] entries  KEYS[4] tags  KEYS[5] summary
--   KEYS[6] writes (write id -> result, for idempotent re-sends)
--   KEYS[7] sessions (user index)  KEYS[8] tagidx (user tag index)
--   KEYS[9] pending (user's sessions waiting for summarization)
-- ARGV: each script's own (these helpers take what they need as parameters).
-- Errors a script raises on purpose start with a code the client maps:
--   REDISMEM_CORRUPT <key> <reason>   the session's keys disagree (evicted apart)

local SESSION_KEYS = 6

-- Length-prefixed string: unambiguous concatenation for tag index members.
local function lp(s)
  return #s .. ':' .. s
end

-- Give every key of the user index the lifetime of its longest-lived session.
local function fit_user_ttl()
  local top = redis.call('ZRANGE', KEYS[7], -1, -1, 'WITHSCORES')
  if #top == 0 then return end
  local deadline = tonumber(top[2])
  for i = 7, 9 do
    if deadline == math.huge then
      redis.call('PERSIST', KEYS[i])
    else
      redis.call('PEXPIREAT', KEYS[i], deadline)
    end
  end
end

-- Sliding TTLs are refreshed lazily: keys get `ttl` plus a slack of ttl/32,
-- and calls leave them alone while they still have at least `ttl` to live, so
-- a busy session pays for the refresh once per slack period rather than on
-- every call. A session thus expires between ttl and ttl + ttl/32 after its
-- last write or read, never sooner. meta `exp` records the deadline set.
local function ttl_slack(ttl)
  return math.floor(ttl / 32)
end

-- Whether the session's keys need their TTL set; `exp` is meta `exp` (nil
-- when unknown: a new session, or one written before `exp` existed).
local function needs_touch(ttl, now, exp)
  if exp == nil then return true end
  if ttl > 0 then return exp == 'inf' or tonumber(exp) - now < ttl end
  return exp ~= 'inf'
end

-- Slide the session's TTL when due: all its keys expire together, and the
-- user index records the deadline so expired sessions can be pruned from it.
-- `exp` as for needs_touch. Returns true when it set the TTLs.
local function touch_session(ttl, now, sid, exp)
  if not needs_touch(ttl, now, exp) then return false end
  if ttl > 0 then
    local deadline = now + ttl + ttl_slack(ttl)
    for i = 1, SESSION_KEYS do redis.call('PEXPIREAT', KEYS[i], deadline) end
    redis.call('ZADD', KEYS[7], deadline, sid)
    redis.call('HSET', KEYS[2], 'exp', deadline)
    cover_guard(deadline)
  else
    for i = 1, SESSION_KEYS do redis.call('PERSIST', KEYS[i]) end
    redis.call('ZADD', KEYS[7], '+inf', sid)
    redis.call('HSET', KEYS[2], 'exp', 'inf')
    cover_guard(math.huge)
  end
  fit_user_ttl()
  return true
end

-- Remove a session from the user's tag index (forward and reverse members).
local function untag_session(sid)
  local prefix = 'r' .. lp(sid)
  local reverse = redis.call('ZRANGEBYLEX', KEYS[8], '[' .. prefix, '(' .. prefix .. '\255')
  for i = 1, #reverse do
    local pair = string.sub(reverse[i], #prefix + 1)
    redis.call('ZREM', KEYS[8], reverse[i], 'f' .. pair .. sid)
  end
end

-- Drop index members of sessions whose deadline has passed (bounded per call).
local function prune_expired(now)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', now, 'LIMIT', 0, 16)
  for i = 1, #expired do
    redis.call('ZREM', KEYS[7], expired[i])
    redis.call('ZREM', KEYS[9], expired[i])
    untag_session(expired[i])
  end
end

-- Token count of a stored message; nil when the element is corrupt.
local function token_count(element)
  return tonumber(string.match(element, '^(%d+)|'))
end

-- First seq of an entry record; nil when the record is corrupt.
local function entry_first_seq(record)
  return tonumber(string.match(record, '^(%d+),'))
end

-- The session's entry records from the newest back to the one holding
-- message `first` (whole records, newest first).
local function entries_covering(first)
  local covering = {}
  local step, stop = 16, -1
  while true do
    local part = redis.call('LRANGE', KEYS[3], stop - step + 1, stop)
    local done = false
    for i = #part, 1, -1 do
      covering[#covering + 1] = part[i]
      local start = entry_first_seq(part[i])
      if start == nil or start <= first then done = true break end
    end
    if done or #part < step then break end
    stop = stop - step
    step = step * 2
  end
  return covering
end

-- Pop entry records whose messages all lie before `head` (the first stored seq).
local function prune_entries(head)
  while true do
    local two = redis.call('LRANGE', KEYS[3], 0, 1)
    if #two < 2 then return end
    -- Stop at a corrupt record rather than fail the write; reads report it.
    local next_first = entry_first_seq(two[2])
    if next_first == nil or next_first > head then return end
    redis.call('LPOP', KEYS[3])
  end
end

-- Remove the `drop` oldest messages, keeping the token counter exact.
local function drop_oldest(drop, last_seq)
  if drop <= 0 then return 0 end
  local dropped = redis.call('LRANGE', KEYS[1], 0, drop - 1)
  local tokens = 0
  -- A corrupt element (no token prefix) is dropped too, counted as 0: failing
  -- here would make every later write to the session fail.
  for i = 1, #dropped do tokens = tokens + (token_count(dropped[i]) or 0) end
  redis.call('LTRIM', KEYS[1], drop, -1)
  redis.call('HINCRBY', KEYS[2], 'tokens', -tokens)
  redis.call('HINCRBY', KEYS[2], 'dropped', #dropped)
  local len = redis.call('LLEN', KEYS[1])
  if len == 0 then
    redis.call('DEL', KEYS[3])
  else
    prune_entries(last_seq - len + 1)
  end
  return #dropped
end

-- Messages not yet summarized beyond the recent window, given the summary
-- watermark `wm` (last summarized seq) and the session's seq and length.
local function unsummarized_backlog(seq, len, wm, keep_recent)
  local covered = math.max(wm, seq - len)
  return seq - covered - keep_recent
end

-- Mark the session pending for the workers when it has work: indexing (with
-- `index` every write has some) or a summarization backlog that reached the
-- batch size. `settings` is "keep_recent,batch,compact" ("" = summarization
-- off), kept in meta as `sumcfg` ("-" when off) so a job enqueued by the
-- reconcile sweep knows them; `wm` is the summary watermark. Returns the
-- pending-since time when this call newly marked it (else 0), and whether
-- the session is marked now (nil when this call did not look).
local function mark_pending(seq, len, wm, settings, index, now, sid)
  local due = index
  if not due and settings ~= '' then
    local keep_recent, batch = string.match(settings, '^(%d+),(%d+),')
    due = unsummarized_backlog(seq, len, wm, tonumber(keep_recent)) >= tonumber(batch)
  end
  if not due then return 0, nil end
  if redis.call('ZADD', KEYS[9], 'NX', now, sid) == 1 then
    if settings == '' then settings = '-' end
    redis.call('HSET', KEYS[2], 'sumcfg', settings)
    return now, 1
  end
  return 0, 1
end

-- Count the messages a trim drops before they were indexed (meta
-- `unindexed`): `max_messages` wins over recall, so the workers never see
-- them. `drop` oldest messages go; `head` is the first stored seq.
local function count_unindexed(drop, head, iwm)
  local lost = drop - math.max(0, math.min(drop, iwm - head + 1))
  if lost > 0 then redis.call('HINCRBY', KEYS[2], 'unindexed', lost) end
end

local function corrupt(key, reason)
  return redis.error_reply('REDISMEM_CORRUPT ' .. key .. ' ' .. reason)
end

-- A script that fails halfway keeps what it wrote (Redis has no rollback):
-- a write checks the type of every key it may write before it writes any.
-- `expected` maps KEYS indexes to their Redis type. Returns an error reply
-- to hand back, or nil.
local function type_error(expected)
  for i, kind in pairs(expected) do
    local found = redis.call('TYPE', KEYS[i])['ok']
    if found ~= 'none' and found ~= kind then
      return corrupt(KEYS[i], 'is a ' .. found .. ', not a ' .. kind)
    end
  end
  return nil
end

-- Check that the session's keys agree with each other; they only disagree
-- when some were evicted (allkeys-* policies) or deleted apart. Returns an
-- error reply to hand back, or nil. `meta` is load_meta(KEYS[2]) (nil when
-- the meta hash does not exist); `len` is LLEN of the messages.
local function integrity_error(meta, len)
  if meta == nil then
    if len > 0 or redis.call('EXISTS', KEYS[3]) == 1 then
      return corrupt(KEYS[2], 'session meta is missing while its messages exist')
    end
    return nil
  end
  local counted = meta.seq - meta.dropped
  if len ~= counted then
    return corrupt(KEYS[1], 'holds ' .. len .. ' messages where meta counts ' .. counted)
  end
  local entries = redis.call('TYPE', KEYS[3])['ok']
  if len > 0 and entries == 'none' then
    return corrupt(KEYS[3], 'entry records are missing while messages exist')
  end
  if entries ~= 'none' and entries ~= 'list' then
    return corrupt(KEYS[3], 'is a ' .. entries .. ', not a list')
  end
  return nil
end

-- Write ids remembered per session: at least this many of the latest writes.
local WRITE_IDS_KEPT = 1000

-- Record a write id with its result `result`, "first_seq,created_ms,n"
-- (formatted by the caller, which has these numbers as strings already),
-- where n is the session's write count after this write, unless the id is
-- already recorded: then return the recorded result (the write is a
-- re-send) and record nothing.
local function remember_write(write_id, result)
  if redis.call('HSETNX', KEYS[6], write_id, result) == 0 then
    return redis.call('HGET', KEYS[6], write_id)
  end
  return nil
end

-- Every WRITE_IDS_KEPT writes (`n`: the session's write count after this
-- one), forget the ids of all but the latest WRITE_IDS_KEPT (amortized O(1)
-- per write).
local function forget_old_writes(n)
  if n % WRITE_IDS_KEPT ~= 0 then return end
  local all = redis.call('HGETALL', KEYS[6])
  local old = {}
  for i = 1, #all, 2 do
    local nth = tonumber(string.match(all[i + 1], ',(%d+)$'))
    if nth == nil or nth <= n - WRITE_IDS_KEPT then old[#old + 1] = all[i] end
  end
  -- In batches: one HDEL per id costs more than the rest of the sweep.
  for i = 1, #old, 500 do
    redis.call('HDEL', KEYS[6], unpack(old, i, math.min(i + 499, #old)))
  end
end
