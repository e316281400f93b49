-- Shared helpers of the LangGraph checkpointer's scripts (lg_*.lua),
-- included by each of them (see redismem.adapters.langgraph and the thread
-- keys in redismem.core.keys: GraphThreadKeys).
-- KEYS[1] ck  KEYS[2] ix  KEYS[3] ids  KEYS[4] bl  KEYS[5] wr  KEYS[6] wi
-- KEYS[7] runs: the keys of one thread (see redismem.adapters.langgraph).
-- ARGV: each script's own.
local function refresh(ttl)
  if ttl > 0 then
    for i = 1, 7 do redis.call('PEXPIRE', KEYS[i], ttl) end
  end
end

-- members of a lexicographic zset starting with prefix
local function with_prefix(key, prefix, limit)
  if limit then
    return redis.call('ZRANGEBYLEX', key, '[' .. prefix, '(' .. prefix .. '\255', 'LIMIT', 0, limit)
  end
  return redis.call('ZRANGEBYLEX', key, '[' .. prefix, '(' .. prefix .. '\255')
end

local function run_of(ix)
  return string.sub(ix, 1, string.find(ix, '|', 1, true) - 1)
end

local function refs_of(ix)
  return string.sub(ix, string.find(ix, '|', 1, true) + 1)
end

local function ns_of(c)
  return string.sub(c, 1, string.find(c, '/', 1, true) - 1)
end

-- delete one checkpoint and its writes; returns its run when the thread
-- holds no other checkpoint of that run
local function drop(c)
  local gone = false
  local ix = redis.call('HGET', KEYS[2], c)
  if ix then
    local run = run_of(ix)
    if run ~= '' then
      redis.call('ZREM', KEYS[7], run .. '/' .. c)
      if #with_prefix(KEYS[7], run .. '/', 1) == 0 then gone = run end
    end
  end
  redis.call('HDEL', KEYS[1], c)
  redis.call('HDEL', KEYS[2], c)
  redis.call('ZREM', KEYS[3], c)
  local ws = with_prefix(KEYS[6], c .. '/')
  for i = 1, #ws do
    redis.call('HDEL', KEYS[5], ws[i])
    redis.call('ZREM', KEYS[6], ws[i])
  end
  return gone
end

-- delete the channel values no checkpoint refers to
local function collect_blobs()
  local keep = {}
  local all = redis.call('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    local ns = ns_of(all[i])
    for ref in string.gmatch(refs_of(all[i + 1]), '%S+') do keep[ns .. '/' .. ref] = true end
  end
  local fields = redis.call('HKEYS', KEYS[4])
  for i = 1, #fields do
    if not keep[fields[i]] then redis.call('HDEL', KEYS[4], fields[i]) end
  end
end
