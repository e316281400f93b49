-- Delete a user's format-1 recall index (`r:*`) once format 2 has taken
-- over (`i:meta v` = 2, index_migrate.lua), a range of docids per call:
-- every posting and filter key a doc of the range names goes whole (after
-- the switch nothing reads or writes format 1), then the docs; the last
-- call deletes the fixed keys and the graves. Idempotent.
-- include: _recall
-- KEYS[1]      the user's format-2 meta (`i:meta`)
-- KEYS[2]      the user's set of graves (format 1)
-- KEYS[3..8]   the user's format-1 recall keys (see _recall.lua)
-- ARGV[1]  prefix of format-1 posting and filter keys (`E r:`)
-- ARGV[2]  the first docid of the range   ARGV[3]  most docids to look at
-- Returns the next docid to start from, or 0 when format 1 is gone (or
-- format 2 has not taken over: nothing is deleted then).
if redis.call('HGET', KEYS[1], 'v') ~= '2' then return 0 end
local prefix, from = ARGV[1], tonumber(ARGV[2])
local last = tonumber(redis.call('HGET', R_STATS, 'next') or '0')
local upto = math.min(last, from + tonumber(ARGV[3]) - 1)
local gone, ids = {}, {}
for id = from, upto do
  local suffixes = redis.call('HGET', R_DKEYS, id)
  if suffixes then
    ids[#ids + 1] = id
    for suffix in string.gmatch(suffixes, '%S+') do
      if not gone[suffix] then
        gone[suffix] = true
        redis.call('UNLINK', prefix .. suffix)
      end
    end
  end
end
if #ids > 0 then
  redis.call('HDEL', R_DKEYS, unpack(ids))
  redis.call('HDEL', R_DOCS, unpack(ids))
  redis.call('HDEL', R_LINKS, unpack(ids))
end
if upto < last then return upto + 1 end
local graves = redis.call('SMEMBERS', KEYS[2])
for i = 1, #graves do redis.call('UNLINK', graves[i]) end
redis.call('UNLINK', KEYS[2], R_DOCS, R_LINKS, R_DKEYS, R_STATS, R_TIME, R_EXP)
return 0
