-- Recall index helpers, included by the recall scripts.
-- The recall keys of the user are always the last six KEYS, in this order
-- (keys.RECALL_KEY_KINDS): docs, links, dkeys, stats, time, exp. Posting and
-- filter keys are `prefix .. suffix` (keys.py builds the suffixes); they
-- carry the user's hash tag, so every key lies in the user's slot.
-- ARGV: none (the scripts hand the key prefix to each helper).
-- docs values are "created_ms,deadline_ms,role|name terms|payload"
-- (deadline "" = kept forever); links "prev|speaker name terms" (prev: the
-- session's doc before it, "" for none); dkeys the suffixes of the
-- posting and filter keys holding the doc, space separated.

local RK = #KEYS - 6
local R_DOCS, R_LINKS, R_DKEYS = KEYS[RK + 1], KEYS[RK + 2], KEYS[RK + 3]
local R_STATS, R_TIME, R_EXP = KEYS[RK + 4], KEYS[RK + 5], KEYS[RK + 6]

-- Remove one doc and every posting and filter entry of it.
local function forget_doc(id, prefix)
  local suffixes = redis.call('HGET', R_DKEYS, id)
  if suffixes then
    for suffix in string.gmatch(suffixes, '%S+') do redis.call('ZREM', prefix .. suffix, id) end
  end
  redis.call('HDEL', R_DKEYS, id)
  redis.call('HDEL', R_LINKS, id)
  redis.call('ZREM', R_TIME, id)
  redis.call('ZREM', R_EXP, id)
  if redis.call('HDEL', R_DOCS, id) == 1 and redis.call('HINCRBY', R_STATS, 'n', -1) <= 0
      and redis.call('EXISTS', prefix .. 'graves') == 0 then
    -- The user's last doc: the stats go too (doc ids may then start over,
    -- which is why index_commit checks a session's last doc is still its own).
    -- Not while a grave may still list doc ids (clear.lua): none is reused.
    redis.call('DEL', R_STATS)
  end
end

-- Forget at most `max` docs whose recall ttl has passed; returns how many.
local function forget_expired(now, prefix, max)
  local ids = redis.call('ZRANGEBYSCORE', R_EXP, '-inf', now, 'LIMIT', 0, max)
  for i = 1, #ids do forget_doc(ids[i], prefix) end
  return #ids
end
