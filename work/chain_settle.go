package work

// The settle side of chains: the Lua that the scripts settling a job (ack,
// dead letter, cancel) run to release or fail the jobs blocked on it, in
// the same script call, so that a holder killed after the settle cannot
// lose the release and a replayed call cannot release twice.
//
// The record that only moves forward is the awaited hash: a dependency's
// field (and the set of its dependents, baton:{q}:awaited:<job id>) is
// taken out by the call that settles it, and the dependents are released
// (their count of dependencies left goes down by one) or dead-lettered in
// that call. A second settle of the same job (it ran
// twice, a script replayed after a lost reply) finds no field and does
// nothing. With no chain in the queue the awaited hash does not exist, and
// a settle costs one EXISTS per script call.
//
// The keys are derived from the queue's stats key (baton:{q}:stats), under
// the queue's hash tag: the settle scripts keep their KEYS as they are.

// chainAckLua holds the helpers every settle script carries: chainKeys
// (stats key → the chain keys), chainRelease (one dependency of job d is
// done: count down, and at zero move d to its stream or the scheduled set)
// and chainDone (jobs done: release their dependents). It needs nothing
// else of the script it is part of.
const chainAckLua = `
local function chainKeys(stats)
  local b = string.sub(stats, 1, #stats - 6)
  return {base = b, blocked = b .. ':blocked', left = b .. ':blocked:left', awaited = b .. ':awaited',
    sched = b .. ':scheduled', schedJobs = b .. ':scheduled:jobs', high = b .. ':high', low = b .. ':low',
    dead = b .. ':dead', index = b .. ':dead:ids', unique = b .. ':unique:', stats = stats}
end
local function chainNow()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function chainRelease(c, d, now)
  local v = redis.call('HGET', c.left, d)
  if not v then return end
  local sp = string.find(v, ' ', 1, true)
  local n, due = tonumber(string.sub(v, 1, sp - 1)) - 1, string.sub(v, sp + 1)
  if n > 0 then
    redis.call('HSET', c.left, d, string.format('%d', n) .. ' ' .. due)
    return
  end
  local rec = redis.call('HGET', c.blocked, d)
  redis.call('HDEL', c.left, d)
  redis.call('HDEL', c.blocked, d)
  if not rec then return end
  if tonumber(due) > now then
    redis.call('HSET', c.schedJobs, d, rec)
    redis.call('ZADD', c.sched, due, d)
    return
  end
  local f, to = cmsgpack.unpack(rec), c.base
  for i = 1, #f, 2 do
    if f[i] == 'priority' and f[i + 1] == 'high' then to = c.high end
    if f[i] == 'priority' and f[i + 1] == 'low' then to = c.low end
  end
  if to ~= c.base and redis.call('EXISTS', to) == 0 then
    redis.call('XGROUP', 'CREATE', to, 'baton', '0', 'MKSTREAM')
  end
  redis.call('XADD', to, '*', unpack(f))
end
-- chainOut: job settled (kind done or dead) and m (">queue job nonce") is
-- a dependent in another queue: its release goes to this queue's outbox,
-- in this call; ForwardChains takes it to that queue (chain_cross.go).
local function chainOut(c, kind, job, m)
  redis.call('RPUSH', c.base .. ':chains:outbox', kind .. ' ' .. job .. ' ' .. string.sub(m, 2))
end
-- chainSettling, before the entries are acknowledged and deleted: nil when
-- the queue has no chain (one EXISTS), else the chain keys and the job ids
-- of the entries still in the stream.
local function chainSettling(stream, stats, ids)
  if redis.call('EXISTS', string.sub(stats, 1, #stats - 6) .. ':awaited') == 0 then return nil end
  local c, jobs = chainKeys(stats), {}
  for _, id in ipairs(ids) do
    local e = redis.call('XRANGE', stream, id, id)
    if #e > 0 then
      local job, f = id, e[1][2]
      for i = 1, #f, 2 do
        if f[i] == 'orig' and f[i + 1] ~= '' then job = f[i + 1] end
      end
      jobs[#jobs + 1] = job
    end
  end
  c.jobs = jobs
  return c
end
local function chainDone(c)
  local now
  for _, job in ipairs(c.jobs) do
    if redis.call('HDEL', c.awaited, job) == 1 then
      local set = c.awaited .. ':' .. job
      local deps = redis.call('SMEMBERS', set)
      redis.call('DEL', set)
      now = now or chainNow()
      for _, d in ipairs(deps) do
        if string.byte(d, 1) == 62 then chainOut(c, 'done', job, d) else chainRelease(c, d, now) end
      end
    end
  end
end
`

// chainDeadLua holds the helpers of the scripts that dead-letter a job
// (dead letter, cancel, the chain scripts): chainBury (a blocked job's
// record becomes a dead letter) and chainDead (a job died: its blocked
// dependents, and theirs, are dead-lettered as dependency_failed). It
// follows entryLua (put, letter, trim, release) and chainAckLua.
const chainDeadLua = `
local function chainBury(c, d, rec, reason, why, deadMax, now)
  local all, f, u = cmsgpack.unpack(rec), {}, nil
  for i = 1, #all, 2 do
    if not letter[all[i]] then put(f, all[i], all[i + 1]) end
    if all[i] == 'unique' then u = c.unique .. all[i + 1] end
  end
  put(f, 'orig', d)
  put(f, 'reason', reason)
  put(f, 'attempts', '0')
  put(f, 'error', why)
  put(f, 'id', d)
  put(f, 'failed_at', string.format('%d', now))
  local over = redis.call('XLEN', c.dead) + 1 - deadMax
  local id = redis.call('XADD', c.dead, '*', unpack(f))
  redis.call('HSET', c.index, d, id)
  trim(c.dead, c.index, over)
  redis.call('HDEL', c.blocked, d)
  redis.call('HDEL', c.left, d)
  if u then release(u, d) end
  redis.pcall('HINCRBY', c.stats, 'dead', 1)
  redis.pcall('HINCRBY', c.stats, 'dead:' .. reason, 1)
  local w = c.base .. ':waiters'
  if redis.call('EXISTS', w) == 1 then notify(w, d, 'dead\n' .. reason .. '\n' .. why) end
  return id
end
local function chainFailFrom(c, job, deadMax)
  local todo, w, now = {job}, 1, nil
  while w <= #todo do
    local x = todo[w]
    w = w + 1
    if redis.call('HDEL', c.awaited, x) == 1 then
      local set = c.awaited .. ':' .. x
      local deps = redis.call('SMEMBERS', set)
      redis.call('DEL', set)
      now = now or chainNow()
      for _, d in ipairs(deps) do
        local rec = string.byte(d, 1) ~= 62 and redis.call('HGET', c.blocked, d)
        if string.byte(d, 1) == 62 then chainOut(c, 'dead', x, d) end
        if rec then
          chainBury(c, d, rec, 'dependency_failed', 'dependency ' .. x .. ' is dead', deadMax, now)
          todo[#todo + 1] = d
        end
      end
    end
  end
end
local function chainDead(stats, job, deadMax)
  if redis.call('EXISTS', string.sub(stats, 1, #stats - 6) .. ':awaited') == 0 then return end
  chainFailFrom(chainKeys(stats), job, deadMax)
end
`

// chainStateLua holds chainState: where a job waited for is now, checked
// where the caller saw it (Locate's hint, see blockScript): done or dead
// wherever it was seen, else "live" when still there, nil when it moved
// (the caller locates it again). A job that is nowhere (hint "u") counts
// as done when nowhereDone. It follows chainAckLua (chainKeys).
const chainStateLua = `
-- holds: the entry of stream s is still there and is job dep's
local function holds(s, entry, dep)
  local e = redis.call('XRANGE', s, entry, entry)
  if #e == 0 then return false end
  local o, f = entry, e[1][2]
  for k = 1, #f, 2 do
    if f[k] == 'orig' and f[k + 1] ~= '' then o = f[k + 1] end
  end
  return o == dep
end
local function chainState(c, dep, hint, nowhereDone)
  if redis.call('ZSCORE', c.base .. ':done', dep) then return 'done' end
  local held = redis.call('HGET', c.index, dep)
  if held and #redis.call('XRANGE', c.dead, held, held) > 0 then return 'dead' end
  local h = string.sub(hint, 1, 1)
  if h == 'r' then
    if redis.call('ZSCORE', c.base .. ':retry', dep) then return 'live' end
  elseif h == 'c' then
    if redis.call('ZSCORE', c.sched, dep) then return 'live' end
  elseif h == 'b' then
    if redis.call('HEXISTS', c.left, dep) == 1 then return 'live' end
  elseif h == 'k' then
    -- in its key's stream: the index names its entry (entry, level, key),
    -- and the entry is still there (the index may outlive the settle)
    local v = redis.call('HGET', c.base .. ':key:jobs', dep)
    if v then
      local entry, level, key = string.match(v, '^([^\n]+)\n([^\n]+)\n(.+)$')
      if entry and holds(c.base .. ':key:s:' .. level .. ':' .. key, entry, dep) then return 'live' end
    end
  elseif h == '0' or h == '1' or h == '2' then
    local streams = {c.base, c.high, c.low}
    if holds(streams[1 + tonumber(h)], string.sub(hint, 3), dep) then return 'live' end
  elseif h == 'u' and nowhereDone then
    return 'done'
  end
  return nil
end
`
