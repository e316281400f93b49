-- Remove for good a batch of the items under a namespace prefix: current
-- versions, histories and index entries (a data-deletion request). Run
-- until it reports no more; each batch is atomic, re-running one is harmless.
-- include: _store
-- KEYS[1..9]   the tenant's store keys (see _store.lua)
-- ARGV[1..3]   key prefixes (see _store.lua)
-- ARGV[4]      namespace ref prefix (ends with '/'), or an item ref
-- ARGV[5]      most items removed in this call
-- ARGV[6]      "1": remove only the item whose ref is ARGV[4]
-- Returns {items removed (those with a version or history left), more (1/0)}.
local prefix, batch = ARGV[4], tonumber(ARGV[5])
local refs = redis.call('ZRANGEBYLEX', KEYS[1], '[' .. prefix, '(' .. prefix .. '\255',
  'LIMIT', 0, batch)
local removed = 0
for i = 1, #refs do
  local ref = refs[i]
  if ARGV[6] == '1' and ref ~= prefix then break end
  if redis.call('DEL', ITEM_PREFIX .. ref, HIST_PREFIX .. ref) > 0 then
    removed = removed + 1
  end
  drop_live(ref)
  redis.call('ZREM', KEYS[1], ref)
  redis.call('ZREM', KEYS[3], ref)
end
drop_if_empty()
if #refs == batch then return {removed, 1} end
return {removed, 0}
