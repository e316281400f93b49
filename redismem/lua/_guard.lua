-- The user guard (redismem.core.guard). The registry (redismem.core.scripts)
-- puts it first in every user-scoped script, after the clock it includes;
-- no script names it. Its check is the first command such a script runs.
-- include: _time
-- The caller sends the user's guard as an extra first key and the epoch it
-- built its keys for as an extra first argument. Both are taken off here,
-- so KEYS[] and ARGV[] are numbered as in the script's own header.
--   KEYS[1]  the user's guard (HASH: e = the user's epoch; absent = 0)
--   ARGV[1]  the epoch the other keys were built for
-- When the user was cleared since (the guard holds another epoch) the
-- script changes nothing and fails with REDISMEM_EPOCH <current epoch>: a
-- client call builds its keys again, a worker drops what it had read.
local GUARD = table.remove(KEYS, 1)
local EPOCH = table.remove(ARGV, 1)
do
  local current = redis.call('HGET', GUARD, 'e') or '0'
  if current ~= EPOCH then return redis.error_reply('REDISMEM_EPOCH ' .. current) end
end

-- Keep the guard at least until `deadline` (ms, or math.huge: forever), a
-- deadline just given to keys of this epoch, so that the guard outlives
-- every key of its epoch. Epoch 0 needs no guard. GT moves a deadline only
-- later, and leaves alone a guard without one (it counts as infinite) or
-- without a key: one command, no PTTL nor clock.
local function cover_guard(deadline)
  if EPOCH == '0' then return end
  if deadline == math.huge then
    redis.call('PERSIST', GUARD)
    return
  end
  redis.call('PEXPIREAT', GUARD, deadline, 'GT')
end
