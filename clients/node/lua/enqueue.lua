-- enqueue: adds a batch of jobs with options (work/keys.go, enqueueScript,
-- says what it does, its KEYS, ARGV and reply). The one source of the
-- script: Go embeds this file, and the Python and Node clients (clients/)
-- run the same bytes. 'baton' is the consumer group (work.Group).
local A = cmsgpack.unpack(ARGV[1])
local level = {['0'] = KEYS[1], ['1'] = KEYS[4], ['2'] = KEYS[5]}
local made = {[KEYS[1]] = true}
-- last: the stream's last id when an XADD of this call made it; ms: its
-- "<ms>-" and seq the last sequence number issued, once parsed; top: the
-- last id issued when it is not the stream's last entry.
local last, ms, seq, top
local function counting()
  if last then
    local d = string.find(last, '-', 1, true)
    local s = string.sub(last, d + 1)
    if #s <= 12 then ms, seq = string.sub(last, 1, d), tonumber(s) end
    last = nil
  end
  return ms
end
-- reserve returns a new id for a job that has no entry in the normal stream.
local function reserve()
  if counting() then
    seq = seq + 1
    top = ms .. seq
    return top
  end
  last = redis.call('XADD', KEYS[1], '*', 'orig', '')
  redis.call('XDEL', KEYS[1], last)
  return last
end
local function mpstr(s)
  if #s < 32 then return string.char(160 + #s) .. s end
  return string.char(217, #s) .. s
end
-- held: unique keys' values before the call; taken: keys taken by it;
-- keep: keys to take without a TTL, and their job ids.
local held, taken, keep, nkeep = {}, {}, {}, 0
if #KEYS > 5 then held = redis.call('MGET', unpack(KEYS, 6)) end
-- records and schedule: the delayed jobs' writes (nd of them); sched: nil
-- until the first delayed job, then true, or the error text when a key has
-- another type.
local records, schedule, nd, sched = {}, {}, 0, nil
local function scheduled()
  for _, kt in ipairs({{KEYS[2], 'zset'}, {KEYS[3], 'hash'}}) do
    local t = redis.call('TYPE', kt[1])['ok']
    if t ~= 'none' and t ~= kt[2] then
      return 'WRONGTYPE ' .. kt[1] .. ' holds a ' .. t .. ', not a ' .. kt[2]
    end
  end
  return true
end
local function add(i, due, to, n)
  local id
  if due ~= '0' then
    if sched == nil then sched = scheduled() end
    if sched ~= true then error({err = sched}) end
    id = reserve()
    records[2 * nd + 1] = id
    records[2 * nd + 2] = A[i] .. '\164orig' .. mpstr(id)
    schedule[2 * nd + 1] = due
    schedule[2 * nd + 2] = id
    nd = nd + 1
  elseif to == KEYS[1] then
    if top then
      -- after an id issued without an entry: the next one, in order
      id = ms .. (seq + 1)
      redis.call('XADD', KEYS[1], id, unpack(A, i, i + n - 1))
      seq, top = seq + 1, nil
    else
      id = redis.call('XADD', KEYS[1], '*', unpack(A, i, i + n - 1))
      last, ms = id, nil
    end
  else
    if not made[to] then
      if redis.call('EXISTS', to) == 0 then
        redis.call('XGROUP', 'CREATE', to, 'baton', '0', 'MKSTREAM')
      end
      made[to] = true
    end
    id = reserve()
    redis.call('XADD', to, '*', 'orig', id, unpack(A, i, i + n - 1))
  end
  return id
end
-- kinds: a job's kind (see A above) → its stream, and whether it has a
-- unique key (u) with a TTL (t).
local kinds = {}
for l, to in pairs(level) do
  kinds[l] = {to = to}
  kinds[l .. 'u'] = {to = to, u = true}
  kinds[l .. 't'] = {to = to, u = true, t = true}
end
local out, codes, jobs, u, i, nargs = {}, {}, 0, 5, 1, #A
while i <= nargs do
  local due, kind, ttl = A[i], kinds[A[i + 1]], nil
  i = i + 2
  if kind.t then
    ttl = A[i]
    i = i + 1
  end
  local n = A[i]
  i = i + 1
  jobs = jobs + 1
  local ukey, old
  if kind.u then
    u = u + 1
    ukey = KEYS[u]
    old = taken[ukey] or held[u - 5]
  end
  if old then
    out[jobs] = old
    codes[#codes + 1] = jobs
  else
    local ok, res = pcall(add, i, due, kind.to, n)
    if ok then
      out[jobs] = res
      if ukey then
        taken[ukey] = res
        if ttl then
          redis.call('SET', ukey, res, 'PX', ttl)
        else
          keep[nkeep + 1] = ukey
          keep[nkeep + 2] = res
          nkeep = nkeep + 2
        end
      end
    else
      local msg = type(res) == 'table' and res.err or tostring(res)
      if string.find(msg, 'OOM', 1, true) == 1 and jobs == 1 then return redis.error_reply(msg) end
      out[jobs] = msg
      codes[#codes + 1] = -jobs
    end
  end
  i = i + n
end
if nd > 0 then
  redis.call('HSET', KEYS[3], unpack(records))
  redis.call('ZADD', KEYS[2], unpack(schedule))
end
if nkeep > 0 then redis.call('MSET', unpack(keep)) end
if top then redis.call('XSETID', KEYS[1], top) end
for _, c in ipairs(codes) do out[#out + 1] = c end
return out
