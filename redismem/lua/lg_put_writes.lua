-- Store pending writes of one checkpoint.
-- unguarded: a thread's keys belong to no user
-- include: _langgraph
-- KEYS[1..7] the thread's keys: ck ix ids bl wr wi runs (see _langgraph.lua)
-- ARGV[1]    ttl ms (0: none)
-- ARGV[2..]  triples: field "C/<task>/<idx>", value, '1' to replace a stored
--            write (special channels) or '0' to keep it (a re-sent regular write)
-- Returns 1.
for i = 2, #ARGV, 3 do
  if ARGV[i + 2] == '1' then
    redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
  else
    redis.call('HSETNX', KEYS[5], ARGV[i], ARGV[i + 1])
  end
  redis.call('ZADD', KEYS[6], 0, ARGV[i])
end
refresh(tonumber(ARGV[1]))
return 1
