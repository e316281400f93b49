-- The session meta hash, read by name (see redismem.core.keys:
-- SESSION_META_FIELDS lists its fields once, with what each holds).
-- KEYS, ARGV: none (the caller names the meta key).

-- The fields of the session meta hash `key` as a table by name, or nil when
-- the hash holds no session (no `seq`). Always read (the fields the write
-- script needs, so the hot path reads each once and nothing more): seq,
-- dropped, tokens, writes, wm, iwm as numbers (0 when absent); exp, rttl as
-- strings (nil when absent: see needs_touch; rttl is set once the session's
-- writes are indexed). `...` names more fields to read, as strings (nil when
-- absent): a field that is absent costs a scan of the whole hash, so a
-- script names only those it uses.
local function load_meta(key, ...)
  local v = redis.call('HMGET', key, 'seq', 'dropped', 'tokens', 'writes', 'exp', 'wm', 'iwm',
    'rttl', ...)
  if not v[1] then return nil end
  local meta = {seq = tonumber(v[1]), dropped = tonumber(v[2] or 0), tokens = tonumber(v[3] or 0),
    writes = tonumber(v[4] or 0), exp = v[5] or nil, wm = tonumber(v[6] or 0),
    iwm = tonumber(v[7] or 0), rttl = v[8] or nil}
  for i = 1, select('#', ...) do
    meta[select(i, ...)] = v[8 + i] or nil
  end
  return meta
end
