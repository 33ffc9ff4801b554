-- keys take: a holder's read while keys have waiting jobs (work/key_read.go,
-- keyTakeScript, says what it does, its KEYS, ARGV and reply).
local g, c, left, base, dflt, mode = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]), ARGV[7]
local names = {'high', 'normal', 'low'}
local stream = {high = KEYS[1], normal = KEYS[2], low = KEYS[3]}
local limits = {}
if ARGV[6] ~= '' then
  local l = cmsgpack.unpack(ARGV[6])
  for i = 1, #l, 2 do limits[l[i]] = tonumber(l[i + 1]) end
end
local function pending(s, e)
  local ok, p = pcall(redis.call, 'XPENDING', s, g, e, e, 1)
  return ok and #p > 0
end
-- live: a permit ("<level>:<entry>") whose entry is still pending, or
-- added by this call (read at the end of its level)
local fresh = {}
local function live(f)
  if fresh[f] then return true end
  local d = string.find(f, ':', 1, true)
  local s = d and stream[string.sub(f, 1, d - 1)]
  return s ~= nil and pending(s, string.sub(f, d + 1))
end
-- permits this holder settled: dropped unless their entry is pending again
for i = 8, #ARGV, 3 do
  local f = ARGV[i + 1] .. ':' .. ARGV[i + 2]
  if not live(f) then redis.call('HDEL', base .. 'run:' .. ARGV[i], f) end
end
-- running: the key's permits, the stale ones (entries settled, a holder
-- gone between settling and dropping them) dropped first when at its cap
local function running(run, cap)
  local n = redis.call('HLEN', run)
  if n < cap then return n end
  for _, f in ipairs(redis.call('HKEYS', run)) do
    if not live(f) then
      redis.call('HDEL', run, f)
      n = n - 1
    end
  end
  return n
end
-- quantum: the most jobs of one key per turn (deficit round robin), 4, or
-- an eighth of a large read: a turn's fixed cost (the ring, the list, the
-- records: four calls) is shared by several jobs, and a read still serves
-- at least 8 keys when that many wait. A small read (slow jobs: a holder
-- reads as its workers free up) passes keys 4 jobs at a time or fewer.
local quantum = math.max(4, math.ceil(left / 8))
local out = {0}
-- turns: the level's keys take turns for up to left jobs (the stream has
-- nothing undelivered left)
local function turns(li, exists)
  local s, lvl = KEYS[li], names[li]
  local ring, fed, capped, looked = KEYS[3 + li], 0, {}, 0
  local eids, erecs, popped = {}, {}, {}
  -- an uncapped key's jobs (ids, records): added after the read below and
  -- left undelivered, for the holder's plain read (no permit to tie them to)
  local feed, frecs = {}, {}
  while left > 0 and looked < left + 32 do
    -- the head key to the tail (its place for the next round), dropped
    -- from there (RPOP) below when its list is empty: one call per turn
    local k = redis.call('LMOVE', ring, ring, 'LEFT', 'RIGHT')
    if not k then break end
    looked = looked + 1
    local q, run = base .. 'q:' .. lvl .. ':' .. k, base .. 'run:' .. k
    local cap = limits[k] or dflt
    -- a turn: up to quantum jobs, within the key's room under its cap
    local room = math.min(left, quantum)
    if capped[k] then
      room = 0
    elseif cap > 0 then
      room = math.min(room, cap - running(run, cap))
    end
    if room > 0 then
      local ids = redis.call('LPOP', q, room)
      if ids then
        local recs = redis.call('HMGET', KEYS[7], unpack(ids))
        for _, id in ipairs(ids) do popped[#popped + 1] = id end
        if not exists then
          redis.call('XGROUP', 'CREATE', s, g, '0', 'MKSTREAM')
          exists = true
        end
        for i, id in ipairs(ids) do
          -- no record: cancelled while it waited (its id stays until now)
          if recs[i] then
            if cap > 0 then
              -- the record as it is, in one field (unpacking it into
              -- fields costs the script more than all the rest of a turn);
              -- orig beside it for those that look for an entry by job id
              local e = redis.call('XADD', s, '*', 'orig', id, 'record', recs[i])
              eids[#eids + 1], erecs[#erecs + 1] = e, recs[i]
              fresh[lvl .. ':' .. e] = true
              redis.call('HSET', run, lvl .. ':' .. e, id)
              redis.call('PEXPIRE', run, 86400000)
              fed = fed + 1
            else
              feed[#feed + 1], frecs[#frecs + 1] = id, recs[i]
            end
            left = left - 1
          end
        end
        -- stays in the ring while it has jobs (fewer than asked: none left)
        if #ids < room or redis.call('LLEN', q) == 0 then redis.call('RPOP', ring) end
      else
        redis.call('RPOP', ring)
      end
    else
      capped[k] = true
      if redis.call('LLEN', q) == 0 then redis.call('RPOP', ring) end
    end
  end
  -- the moved jobs' records, all at once (nothing here reads them again)
  if #popped > 0 then redis.call('HDEL', KEYS[7], unpack(popped)) end
  if fed > 0 then
    -- exactly the entries just added: nothing else was undelivered. They
    -- become pending for the consumer here, in the script, with their
    -- permits. The holder gets their records as they are, one per job.
    local r = redis.call('XREADGROUP', 'GROUP', g, c, 'COUNT', fed, 'STREAMS', s, '>')
    if r and r[1] and #r[1][2] == fed and r[1][2][1][1] == eids[1] then
      out[#out + 1] = {s, eids, erecs, 2}
    else
      out[#out + 1] = {s, r and r[1] and r[1][2] or {}, 1}
    end
  end
  if #feed > 0 then
    -- Uncapped keys' jobs: the holder reads them next with a plain
    -- XREADGROUP, far cheaper than a read here (a script turns each entry
    -- of a reply into Lua values). Any holder may read them meanwhile; an
    -- uncapped key's job needs no permit, so whoever does runs it.
    for i, id in ipairs(feed) do
      redis.call('XADD', s, '*', 'orig', id, 'record', frecs[i])
    end
    out[#out + 1] = {s, #feed}
  end
end
-- later: stream id a comes after b
local function later(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if tonumber(am) ~= tonumber(bm) then return tonumber(am) > tonumber(bm) end
  return tonumber(as) > tonumber(bs)
end
if mode == 'pipe' then
  -- The holder reads the normal stream itself, next in the same round
  -- trip (XREADGROUP COUNT left): only the normal level is in use.
  if redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[4], KEYS[6]) > 0 then
    out[1] = 1
    out[#out + 1] = 'levels'
    return out
  end
  local s = KEYS[2]
  local exists = redis.call('EXISTS', s) == 1
  local undelivered = false
  if exists then
    -- an entry after the group's last delivered one: the holder's read
    -- takes it (jobs without a key, as before); no turns meanwhile
    local last = redis.call('XREVRANGE', s, '+', '-', 'COUNT', 1)
    if #last > 0 then
      local delivered
      for _, gr in ipairs(redis.call('XINFO', 'GROUPS', s)) do
        local f = {}
        for i = 1, #gr, 2 do f[gr[i]] = gr[i + 1] end
        if f['name'] == g then delivered = f['last-delivered-id'] end
      end
      undelivered = delivered == nil or later(last[1][1], delivered)
    end
  end
  if not undelivered then turns(2, exists) end
else
  for li = 1, 3 do
    if left <= 0 then break end
    local s = KEYS[li]
    local exists = redis.call('EXISTS', s) == 1
    if exists then
      -- the level's new entries first: jobs without a key, as before
      local r = redis.call('XREADGROUP', 'GROUP', g, c, 'COUNT', left, 'STREAMS', s, '>')
      if r and r[1] then
        out[#out + 1] = {s, r[1][2], 0}
        left = left - #r[1][2]
      end
    end
    -- Fewer than asked: the stream has nothing undelivered left. Take
    -- turns over the level's keys for the rest.
    if left > 0 then turns(li, exists) end
  end
end
if redis.call('EXISTS', KEYS[4], KEYS[5], KEYS[6]) > 0 then out[1] = 1 end
return out
