-- Purge the docs of a cleared session from a user's format-2 recall index
-- (clear.lua tombstoned them and listed the session's ordinal in i:purge):
-- every posting and filter list the caller names is rewritten without the
-- session's docs (deleted when none is left), and with `final` the docs'
-- records, doc-table slots and session list go too, so nothing of the
-- session stays in Redis. Idempotent: an ordinal no longer in i:purge is
-- done, and a list without the session's docs is left as it is.
-- include: _index _postings
-- KEYS[1..6]  the user's format-2 keys (keys.INDEX_KEY_KINDS, see _index.lua)
-- KEYS[7]     the user's ordinals to purge (i:purge)
-- ARGV[1]     prefix of the format-2 lists (`E i:`)
-- ARGV[2]     the session's ordinal
-- ARGV[3]     "1" when this is the final call for the ordinal
-- ARGV[4]     L, the number of list suffixes; ARGV[5 .. 4+L] the suffixes
--             (`t:<term>`, `f:a:..`, `f:g:..`) of the lists to rewrite
-- then        B, the number of sealed record blocks; B triples: block
--             number, its bytes as the caller read them, its bytes without
--             the session's records ("" = no record left: the block goes)
-- Returns 1 done (or nothing to do), -1 a sealed block changed or was
-- sealed since the caller read it (read them again and retry).
local ik = index2_keys(1, ARGV[1])
local PURGE = KEYS[7]
local ord = ARGV[2]
if redis.call('SISMEMBER', PURGE, ord) == 0 then return 1 end
local own = ik.prefix .. 'f:s:' .. ord
local docs = postings_docs(redis.call('GET', own) or '')
local gone = {}
for i = 1, #docs do gone[docs[i]] = true end

-- The list s without the docs in `gone`: its new bytes, or nil when it
-- holds none of them ('' when it held only them).
local function without(s)
  local kept, last, changed = {}, 0, false
  local pos, len, doc, prev = 5, #s, 0, 0
  while pos <= len do
    local v, m = 0, 1
    local b = string.byte(s, pos)
    pos = pos + 1
    while b >= 128 do
      v = v + (b - 128) * m
      m = m * 128
      b = string.byte(s, pos)
      pos = pos + 1
    end
    v = v + b * m
    local q = v % 64
    doc = doc + (v - q) / 64
    if gone[doc] then
      changed = true
    else
      kept[#kept + 1] = i_varint((doc - prev) * 64 + q)
      prev = doc
      last = doc
    end
  end
  if not changed then return nil end
  if #kept == 0 then return '' end
  return i_be(last, 4) .. table.concat(kept)
end

local nlists = tonumber(ARGV[4])
for i = 5, 4 + nlists do
  local key = ik.prefix .. ARGV[i]
  local s = redis.call('GET', key)
  if s then
    local new = without(s)
    if new == '' then
      redis.call('DEL', key)
    elseif new then
      redis.call('SET', key, new, 'KEEPTTL')
    end
  end
end
if ARGV[3] ~= '1' then return 1 end

-- Records: open ones in i:rec, sealed ones in the blocks the caller rewrote.
local at = 5 + nlists
local nblocks = tonumber(ARGV[at])
local rewritten = {}
for i = 0, nblocks - 1 do
  local block, old, new = ARGV[at + 1 + 3 * i], ARGV[at + 2 + 3 * i], ARGV[at + 3 + 3 * i]
  if redis.call('HGET', ik.docs, block) ~= old then return -1 end
  rewritten[tonumber(block)] = {block, new}
end
for i = 1, #docs do
  local block = math.floor(docs[i] / I_BLOCK)
  if not rewritten[block] and redis.call('HEXISTS', ik.docs, block) == 1 then return -1 end
end
for _, change in pairs(rewritten) do
  if change[2] == '' then
    redis.call('HDEL', ik.docs, change[1])
  else
    redis.call('HSET', ik.docs, change[1], change[2])
  end
end
local blank = string.rep('\0', I_SLOT)
for i = 1, #docs do
  local d = docs[i]
  redis.call('HDEL', ik.rec, d)
  local chunk = ik.prefix .. 'dt:' .. math.floor(d / I_CHUNK)
  if redis.call('EXISTS', chunk) == 1 then
    redis.call('SETRANGE', chunk, (d % I_CHUNK) * I_SLOT, blank)
  end
end
redis.call('DEL', own)
redis.call('HDEL', ik.sess, '#' .. ord)
redis.call('SREM', PURGE, ord)
if redis.call('EXISTS', ik.meta) == 1 then
  local dead = redis.call('HINCRBY', ik.meta, 'dead', -#docs)
  if dead < 0 then redis.call('HSET', ik.meta, 'dead', 0) end
end
return 1
