-- Copy records into a thread (copy_thread).
-- unguarded: a thread's keys belong to no user
-- include: _langgraph
-- KEYS[1..7] the thread's keys: ck ix ids bl wr wi runs (see _langgraph.lua)
-- ARGV[1]    ttl ms (0: none)
-- ARGV[2]    'b': blob field, value pairs follow; 'w': write field, value
--            pairs; 'c': C, ck, ix triples
-- ARGV[3..]  the records, as ARGV[2] says
-- Returns 1.
local kind = ARGV[2]
if kind == 'b' then
  for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[4], ARGV[i], ARGV[i + 1]) end
elseif kind == 'w' then
  for i = 3, #ARGV, 2 do
    redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
    redis.call('ZADD', KEYS[6], 0, ARGV[i])
  end
else
  for i = 3, #ARGV, 3 do
    local c, ix = ARGV[i], ARGV[i + 2]
    redis.call('HSET', KEYS[1], c, ARGV[i + 1])
    redis.call('HSET', KEYS[2], c, ix)
    redis.call('ZADD', KEYS[3], 0, c)
    if run_of(ix) ~= '' then redis.call('ZADD', KEYS[7], 0, run_of(ix) .. '/' .. c) end
  end
end
refresh(tonumber(ARGV[1]))
return 1
