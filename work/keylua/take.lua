-- keys take: a holder's read while keys have waiting jobs (work/key_read.go,
-- keyTakeScript, says what it does, its KEYS, ARGV and reply). It follows
-- keyStreamLua (work/keys.go: groupOf, stillNamed).
local g, c, left, base, dflt, mode = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]), ARGV[7]
local names = {'high', 'normal', 'low'}
local limits = {}
if ARGV[6] ~= '' then
  local l = cmsgpack.unpack(ARGV[6])
  for i = 1, #l, 2 do limits[l[i]] = tonumber(l[i + 1]) end
end
-- The index entries of jobs this holder settled (pairs of job id, entry
-- id), dropped unless they name a newer entry of the job (parked again).
if #ARGV >= 9 then
  local ids, ents = {}, {}
  for i = 8, #ARGV - 1, 2 do
    ids[#ids + 1], ents[#ents + 1] = ARGV[i], ARGV[i + 1]
  end
  local drop = stillNamed(KEYS[7], ids, ents, {})
  if #drop > 0 then redis.call('HDEL', KEYS[7], unpack(drop)) end
end
-- look: a stream's state for group g: whether it has undelivered
-- entries, how many, and its pending entries (running jobs: a capped
-- key's permits). Nothing undelivered when it is gone. Every script that
-- acknowledges an entry deletes it, so what the stream holds beyond its
-- pending entries waits. The group's lag alone would not do: a lag of 0 is
-- exact, a larger one may count undelivered entries deleted since (a
-- cancel, once they fall before the stream's first entry or the stream is
-- left empty: Redis sees no gap), or be unknown (nil).
local function look(s)
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', s)
  if not ok then return false, 0, 0 end
  local f = groupOf(groups, g)
  if f then
    local lag, running = f['lag'], f['pending']
    if lag == 0 then return false, 0, running end
    local n = redis.call('XLEN', s) - running
    if type(lag) == 'number' and lag < n then n = lag end
    return n > 0, n, running
  end
  -- a stream without the group (deleted by hand): every entry is new
  redis.call('XGROUP', 'CREATE', s, g, '0')
  local n = redis.call('XLEN', s)
  return n > 0, n, 0
end
-- quantum: the most jobs of one key per turn (deficit round robin), 4, or
-- a quarter of a large read: a turn's fixed cost (its calls, a stream in
-- the holder's read, the stream's share of the ack) is shared by several
-- jobs, and a read still serves at least 4 keys when that many wait. A small read (slow jobs: a holder reads as its workers
-- free up) passes keys 4 jobs at a time or fewer.
local quantum = math.max(4, math.ceil(left / 4))
local turned = false -- a key's turn gave jobs in this call
local out = {0}
-- turns: the level's keys take turns for up to left jobs (the level's
-- stream has nothing undelivered left)
local function turns(li)
  local lvl, ring = names[li], KEYS[3 + li]
  local members = base .. 'in:' .. lvl
  local feed, looked = {}, 0
  while left > 0 and looked < left + 32 do
    -- the head key to the tail (its place for the next round), dropped
    -- from there (RPOP) when it has nothing undelivered: one call a turn
    local k = redis.call('LMOVE', ring, ring, 'LEFT', 'RIGHT')
    if not k then break end
    looked = looked + 1
    local s = base .. 's:' .. lvl .. ':' .. k
    local waits, n, running = look(s)
    if not waits then
      redis.call('RPOP', ring)
      redis.call('SREM', members, k)
    else
      local cap = limits[k] or dflt
      local room = math.min(left, quantum, n)
      if room < math.min(quantum, n) and turned then
        -- The read is full before this key's turn is: the key goes back
        -- to the head, for a whole turn with the next read (cut short, it
        -- would need one more turn, and a stream read, for a few jobs).
        -- Not the call's first turn: jobs without a key may fill most of
        -- every read, and keys still take turns in what is left.
        redis.call('LMOVE', ring, ring, 'RIGHT', 'LEFT')
        left = 0
        break
      end
      if cap > 0 then
        -- Read here, atomically with the count: never over the cap. A
        -- key at its cap keeps its place in the ring. The cap is the
        -- key's, whatever the level: its other levels' running jobs count.
        for o = 1, 3 do
          if o ~= li then
            local ok, p = pcall(redis.call, 'XPENDING', base .. 's:' .. names[o] .. ':' .. k, g)
            if ok then running = running + p[1] end
          end
        end
        room = math.min(room, cap - running)
        if room > 0 then
          local r = redis.call('XREADGROUP', 'GROUP', g, c, 'COUNT', room, 'STREAMS', s, '>')
          if r and r[1] then
            out[#out + 1] = {s, r[1][2]}
            left = left - #r[1][2]
            turned = true
          end
        end
      else
        -- An uncapped key needs no count: the holder reads its stream
        -- next with a plain XREADGROUP (a script turns each entry of a
        -- reply into Lua values: as dear as the rest of the turn).
        feed[#feed + 1] = s
        feed[#feed + 1] = room
        left = left - room
        turned = true
      end
    end
  end
  if #feed > 0 then out[#out + 1] = {'feed', feed} end
end
if mode == 'pipe' then
  -- The holder reads the normal stream itself, next in the same round
  -- trip (XREADGROUP COUNT left): only the normal level is in use.
  if redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[4], KEYS[6]) > 0 then
    out[1] = 1
    out[#out + 1] = 'levels'
    return out
  end
  -- an undelivered entry in the level's stream: the holder's read takes
  -- it (jobs without a key, as before); no turns meanwhile
  if not look(KEYS[2]) then turns(2) end
else
  for li = 1, 3 do
    if left <= 0 then break end
    local s = KEYS[li]
    if redis.call('EXISTS', s) == 1 then
      -- the level's new entries first: jobs without a key, as before
      local r = redis.call('XREADGROUP', 'GROUP', g, c, 'COUNT', left, 'STREAMS', s, '>')
      if r and r[1] then
        out[#out + 1] = {s, r[1][2]}
        left = left - #r[1][2]
      end
    end
    -- Fewer than asked: the stream has nothing undelivered left. Take
    -- turns over the level's keys for the rest.
    if left > 0 then turns(li) end
  end
end
if redis.call('EXISTS', KEYS[4], KEYS[5], KEYS[6]) > 0 then out[1] = 1 end
return out
