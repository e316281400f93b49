-- Shared helpers of the long-term store scripts (store_*.lua), included by
-- each of them (see redismem.longterm.store).
-- include: _time
-- Every store script works on the keys of one tenant:
--   KEYS[1] refs        ZSET (lex) every item ref with an item or a history
--   KEYS[2] updated     ZSET live item ref -> updated ms
--   KEYS[3] expiry      ZSET item ref -> deadline ms of its keys (put with a ttl)
--   KEYS[4] namespaces  HASH namespace ref -> number of live items
--   KEYS[5] doclen      HASH indexed item ref -> number of its terms
--   KEYS[6] docterms    HASH indexed item ref -> its distinct terms (escaped,
--                       space separated), to take it out of the postings
--   KEYS[7] stats       HASH docs, len (BM25 totals), clock (last ms handed out)
--   KEYS[8] ops         HASH write id -> result of the write (re-sends apply once)
--   KEYS[9] optimes     ZSET write id -> ms it was applied (to prune ops)
--   ARGV[1] item key prefix  ARGV[2] history key prefix  ARGV[3] term key prefix
-- The keys of single items (prefix .. ref) and of term postings (prefix ..
-- escaped term) are built from these prefixes; the prefixes carry the
-- tenant's hash tag, so every key a script touches lies in the slot of KEYS.
-- A record (item value or history entry) is
--   "<version>,<created_ms>,<updated_ms>,<p|d>," .. msgpack payload
-- with p for a put and d for a delete tombstone.

local ITEM_PREFIX, HIST_PREFIX, TERM_PREFIX = ARGV[1], ARGV[2], ARGV[3]
-- Expired items cleaned up per write: bounded work, and no pile-up since
-- every write cleans more than it can leave behind.
local PRUNE_BATCH = 32
-- How long a write id is remembered (re-sends come within seconds).
local OP_WINDOW_MS = 3600000

-- The tenant's clock: server time, but strictly increasing, so the newest
-- update of a tenant always sorts first.
local function clock()
  local now = now_ms()
  local last = tonumber(redis.call('HGET', KEYS[7], 'clock') or '0')
  if now <= last then now = last + 1 end
  redis.call('HSET', KEYS[7], 'clock', now)
  return now
end

-- The namespace ref of an item ref (up to the key mark).
local function ns_of(ref)
  return string.sub(ref, 1, string.find(ref, '#', 1, true) - 1)
end

local function parse_record(record)
  local v, c, u, op = string.match(record, '^(%d+),(%d+),(%d+),(%a),')
  return tonumber(v), tonumber(c), tonumber(u), op
end

-- Take an item out of the keyword index.
local function unindex(ref)
  local terms = redis.call('HGET', KEYS[6], ref)
  if not terms then return end
  for term in string.gmatch(terms, '%S+') do
    redis.call('ZREM', TERM_PREFIX .. term, ref)
  end
  local length = tonumber(redis.call('HGET', KEYS[5], ref) or '0')
  redis.call('HDEL', KEYS[5], ref)
  redis.call('HDEL', KEYS[6], ref)
  redis.call('HINCRBY', KEYS[7], 'docs', -1)
  redis.call('HINCRBY', KEYS[7], 'len', -length)
end

-- Put an item into the keyword index: ARGV[first], ARGV[first + 1], ... are
-- pairs of escaped term and frequency, KEYS[first_key ..] their postings.
local function index(ref, first, first_key, length)
  if first > #ARGV then return end
  local names = {}
  for i = first, #ARGV, 2 do
    local n = (i - first) / 2
    redis.call('ZADD', KEYS[first_key + n], tonumber(ARGV[i + 1]), ref)
    names[#names + 1] = ARGV[i]
  end
  redis.call('HSET', KEYS[5], ref, length)
  redis.call('HSET', KEYS[6], ref, table.concat(names, ' '))
  redis.call('HINCRBY', KEYS[7], 'docs', 1)
  redis.call('HINCRBY', KEYS[7], 'len', length)
end

local function add_live(ref, now)
  if not redis.call('ZSCORE', KEYS[2], ref) then
    redis.call('HINCRBY', KEYS[4], ns_of(ref), 1)
  end
  redis.call('ZADD', KEYS[2], now, ref)
end

-- Forget that an item is live: the updated index, its namespace's count and
-- the keyword index.
local function drop_live(ref)
  if redis.call('ZSCORE', KEYS[2], ref) then
    redis.call('ZREM', KEYS[2], ref)
    local ns = ns_of(ref)
    if redis.call('HINCRBY', KEYS[4], ns, -1) <= 0 then redis.call('HDEL', KEYS[4], ns) end
  end
  unindex(ref)
end

-- Bring the indexes of one ref in line with its keys, which may have expired.
local function settle(ref)
  if redis.call('EXISTS', ITEM_PREFIX .. ref) == 1 then return end
  drop_live(ref)
  if redis.call('EXISTS', HIST_PREFIX .. ref) == 0 then
    redis.call('ZREM', KEYS[1], ref)
    redis.call('ZREM', KEYS[3], ref)
  end
end

-- When nothing of the tenant is left, drop its bookkeeping too.
local function drop_if_empty()
  if redis.call('ZCARD', KEYS[1]) == 0 then
    redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9])
  end
end

-- Clean up after at most `batch` items whose deadline has passed. Returns 1
-- when there may be more.
local function prune(now, batch)
  local refs = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, batch)
  for i = 1, #refs do
    local ref = refs[i]
    settle(ref)
    if redis.call('ZSCORE', KEYS[3], ref) then
      -- Still there (expiring this very millisecond, or a TTL changed by
      -- hand): record the deadline its keys really have.
      local ttl = math.max(redis.call('PTTL', ITEM_PREFIX .. ref),
        redis.call('PTTL', HIST_PREFIX .. ref))
      if ttl == -1 then
        redis.call('ZREM', KEYS[3], ref)
      else
        redis.call('ZADD', KEYS[3], now + math.max(ttl, 1), ref)
      end
    end
  end
  drop_if_empty()
  if #refs == batch then return 1 end
  return 0
end

-- Give an item's keys the deadline of its latest put (ttl 0: none).
local function set_deadline(ref, now, ttl)
  local item, hist = ITEM_PREFIX .. ref, HIST_PREFIX .. ref
  if ttl > 0 then
    local deadline = now + ttl
    redis.call('PEXPIREAT', item, deadline)
    redis.call('PEXPIREAT', hist, deadline)
    redis.call('ZADD', KEYS[3], deadline, ref)
    cover_guard(deadline)
  else
    redis.call('PERSIST', item)
    redis.call('PERSIST', hist)
    redis.call('ZREM', KEYS[3], ref)
    cover_guard(math.huge)
  end
end

local function remember_op(op, result, now)
  redis.call('HSET', KEYS[8], op, result)
  redis.call('ZADD', KEYS[9], now, op)
  local old = redis.call('ZRANGEBYSCORE', KEYS[9], '-inf', now - OP_WINDOW_MS,
    'LIMIT', 0, PRUNE_BATCH)
  if #old > 0 then
    redis.call('HDEL', KEYS[8], unpack(old))
    redis.call('ZREM', KEYS[9], unpack(old))
  end
  redis.call('PEXPIRE', KEYS[8], OP_WINDOW_MS)
  redis.call('PEXPIRE', KEYS[9], OP_WINDOW_MS)
end
