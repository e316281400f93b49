-- Store one checkpoint.
-- unguarded: a thread's keys belong to no user
-- include: _langgraph
-- KEYS[1..7] the thread's keys: ck ix ids bl wr wi runs (see _langgraph.lua)
-- ARGV[1]    ttl ms (0: none)   ARGV[2] C   ARGV[3] the checkpoint (ck)
-- ARGV[4]    its ix text "<run>|<refs>"
-- ARGV[5..]  channel values: blob field, value pairs
-- Returns 1.
local c = ARGV[2]
for i = 5, #ARGV, 2 do redis.call('HSET', KEYS[4], ARGV[i], ARGV[i + 1]) end
local old = redis.call('HGET', KEYS[2], c)
if old and run_of(old) ~= '' and run_of(old) ~= run_of(ARGV[4]) then
  redis.call('ZREM', KEYS[7], run_of(old) .. '/' .. c)
end
redis.call('HSET', KEYS[1], c, ARGV[3])
redis.call('HSET', KEYS[2], c, ARGV[4])
redis.call('ZADD', KEYS[3], 0, c)
if run_of(ARGV[4]) ~= '' then redis.call('ZADD', KEYS[7], 0, run_of(ARGV[4]) .. '/' .. c) end
refresh(tonumber(ARGV[1]))
return 1
