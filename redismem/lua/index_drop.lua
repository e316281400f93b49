-- Drop the whole format-2 index of a user none of whose docs is live any
-- more (every session of it cleared and purged: i:meta n = 0, i:purge
-- empty), so that clearing a user's last session leaves no recall key.
-- A purge deleted every list of those docs, so what is left is the fixed
-- keys and the doc-table chunks up to i:meta next: no SCAN needed. A
-- commit since the caller read i:meta moved next, and nothing is dropped.
-- include: _index
-- KEYS[1..6]  the user's format-2 keys (keys.INDEX_KEY_KINDS, see _index.lua)
-- KEYS[7]     the user's ordinals to purge (i:purge)
-- ARGV[1]     prefix of the format-2 lists (`E i:`)
-- ARGV[2]     i:meta next as the caller read it
-- Returns 1 when dropped, 0 when a doc is live, a purge is left or a doc
-- was committed since.
local state = redis.call('HMGET', KEYS[1], 'v', 'n', 'next')
if state[1] ~= '2' or tonumber(state[2] or '0') > 0 or state[3] ~= ARGV[2] then return 0 end
if redis.call('EXISTS', KEYS[7]) == 1 then return 0 end
local last = tonumber(state[3] or '0')
local batch = {}
for chunk = 0, math.floor(last / I_CHUNK) do
  batch[#batch + 1] = ARGV[1] .. 'dt:' .. chunk
  if #batch == 500 then
    redis.call('UNLINK', unpack(batch))
    batch = {}
  end
end
if #batch > 0 then redis.call('UNLINK', unpack(batch)) end
redis.call('UNLINK', unpack(KEYS, 1, 6))
return 1
