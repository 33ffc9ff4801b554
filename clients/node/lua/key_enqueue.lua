-- keys enqueue: adds jobs that have a key and no delay to their keys' streams
-- (work/key_enqueue.go, keyEnqueueScript, says what it does, its KEYS, ARGV
-- and reply). Go embeds this file, and the Python and Node clients run the
-- same bytes (their lua/key_enqueue.lua; make clients-lua).
local A = cmsgpack.unpack(ARGV[2])
local base = ARGV[1]
-- the consumer group of every stream of the queue (work.Group)
local group = 'baton'
local function mpstr(s)
  if #s < 32 then return string.char(160 + #s) .. s end
  return string.char(217, #s) .. s
end
local out, codes, taken, u, jobs, i = {}, {}, {}, 2, 0, 1
while i <= #A do
  local lvl, key, uk = A[i], A[i + 1], A[i + 2]
  i = i + 3
  local ttl
  if uk == 't' then
    ttl = A[i]
    i = i + 1
  end
  local rec = A[i]
  i = i + 1
  jobs = jobs + 1
  local ukey, old
  if uk ~= '' then
    u = u + 1
    ukey = KEYS[u]
    -- MGET: a unique key of another type reads as free, as in enqueue.lua
    old = taken[ukey] or redis.call('MGET', ukey)[1]
  end
  if old then
    out[jobs] = old
    codes[#codes + 1] = jobs
  else
    -- the job's id, from the normal stream's id space: an entry added and
    -- deleted at once, never seen by a reader (the script is atomic)
    local id = redis.call('XADD', KEYS[1], '*', 'orig', '')
    redis.call('XDEL', KEYS[1], id)
    local s = base .. 's:' .. lvl .. ':' .. key
    if redis.call('EXISTS', s) == 0 then
      redis.call('XGROUP', 'CREATE', s, group, '0', 'MKSTREAM')
      redis.call('SADD', base .. 'streams', s)
    end
    -- the job's fields, orig last; under its own id when the key's stream
    -- takes it (ids only grow, but a stream re-made after a loss may not)
    local f = cmsgpack.unpack(rec .. '\164orig' .. mpstr(id))
    local ok, e = pcall(redis.call, 'XADD', s, id, unpack(f))
    if not ok then e = redis.call('XADD', s, '*', unpack(f)) end
    redis.call('HSET', KEYS[2], id, e .. '\n' .. lvl .. '\n' .. key)
    if redis.call('SADD', base .. 'in:' .. lvl, key) == 1 then
      redis.call('RPUSH', base .. 'ring:' .. lvl, key)
    end
    if ukey then
      taken[ukey] = id
      if ttl then redis.call('SET', ukey, id, 'PX', ttl) else redis.call('SET', ukey, id) end
    end
    out[jobs] = id
  end
end
for _, c in ipairs(codes) do out[#out + 1] = c end
return out
