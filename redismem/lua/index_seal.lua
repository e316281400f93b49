-- Seal a record block of format 2: the records of docids 64b .. 64b+63
-- move from `i:rec` to one zlib block in `i:docs` (built by the worker,
-- index.seal_blocks, from what it read of `i:rec`). Idempotent: a block
-- already sealed is not written again (a re-sent call, or another worker
-- sealing it first), so records already moved are never looked for.
-- Compare-and-set on what was read: when the block's records in `i:rec` are
-- no longer the ones the caller saw (a clear's purge deleted some since,
-- index_purge.lua), nothing is written, so a purged record never comes back
-- inside a sealed block; the caller reads again.
-- The block's key deadline comes from its docs' doc-table deadlines.
-- include: _index
-- KEYS[1..6]  the user's format-2 keys (see _index.lua)
-- ARGV[1]     prefix of format-2 keys (`E i:`)
-- ARGV[2]     the block number b
-- ARGV[3]     the block (postings.encode_block of the 64 records)
-- ARGV[4]     the caller's read of the 64 records, docid 64b first: each
--             record as "+<bytes>:<record>", or "-" when it had none
--             (scripts.records_as_read; compared whole, as the embedded
--             backend's Lua has no redis.sha1hex)
-- Returns {1 sealed now, 0 sealed before, -1 i:rec changed since the read;
-- i:meta sealed after the call}.
local IK = index2_keys(1, ARGV[1])
local b = tonumber(ARGV[2])
local sealed = 0
if redis.call('HEXISTS', IK.docs, b) == 0 then
  local ids = {}
  for d = b * I_BLOCK, (b + 1) * I_BLOCK - 1 do ids[#ids + 1] = d end
  local now = redis.call('HMGET', IK.rec, unpack(ids))
  local parts = {}
  for i = 1, I_BLOCK do
    if now[i] then parts[i] = '+' .. #now[i] .. ':' .. now[i] else parts[i] = '-' end
  end
  if table.concat(parts) ~= ARGV[4] then
    return {-1, tonumber(redis.call('HGET', IK.meta, 'sealed') or '0')}
  end
  -- The newest deadline of the block's docs (a block of 64 lies in one
  -- doc-table chunk).
  local first = b * I_BLOCK
  local at = (first % I_CHUNK) * I_SLOT
  local slots = redis.call('GETRANGE', IK.prefix .. 'dt:' .. math.floor(first / I_CHUNK),
    at, at + I_BLOCK * I_SLOT - 1)
  local deadline = nil
  for s = 0, math.floor(#slots / I_SLOT) - 1 do
    local from = s * I_SLOT + 1
    if i_unbe(slots, from, 6) > 0 then
      local field = i_unbe(slots, from + 6, 4)
      local ms = math.huge
      if field > 0 then ms = I_EPOCH_2020_MS + field * 1000 end
      if not deadline or ms > deadline then deadline = ms end
    end
  end
  if deadline then
    local fresh = {}
    if redis.call('EXISTS', IK.docs) == 0 then fresh[IK.docs] = true end
    redis.call('HSET', IK.docs, b, ARGV[3])
    i_expire({[IK.docs] = deadline}, fresh)
    cover_guard(deadline)
    sealed = 1
  end
  -- No live slot: every doc of the block is gone (expired): nothing to keep.
  redis.call('HDEL', IK.rec, unpack(ids))
end
local mark = tonumber(redis.call('HGET', IK.meta, 'sealed') or '0')
if mark == b and redis.call('EXISTS', IK.meta) == 1 then
  mark = b + 1
  while redis.call('HEXISTS', IK.docs, mark) == 1 do mark = mark + 1 end
  redis.call('HSET', IK.meta, 'sealed', mark)
end
return {sealed, mark}
