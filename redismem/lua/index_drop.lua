-- Drop the whole format-2 index of a user none of whose docs is live any
-- more (every session of it cleared: i:meta n = 0), so that clearing a
-- user's last session leaves no recall key. The caller found the keys by
-- SCAN after reading i:meta next; a commit since (which may have made
-- keys the SCAN missed) moved next, and then nothing is dropped.
-- KEYS[1..6]  the user's format-2 keys (see _index.lua)
-- ARGV[1]     i:meta next as the caller read it before its SCAN
-- ARGV[2..]   the other keys of the family the SCAN found
-- Returns 1 when dropped, 0 when a doc is live or was committed since.
local state = redis.call('HMGET', KEYS[1], 'v', 'n', 'next')
if state[1] ~= '2' or tonumber(state[2] or '0') > 0 or state[3] ~= ARGV[1] then return 0 end
local batch = {}
for i = 2, #ARGV do
  batch[#batch + 1] = ARGV[i]
  if #batch == 500 then
    redis.call('UNLINK', unpack(batch))
    batch = {}
  end
end
if #batch > 0 then redis.call('UNLINK', unpack(batch)) end
redis.call('UNLINK', unpack(KEYS, 1, 6))
return 1
