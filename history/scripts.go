package history

import "github.com/redis/go-redis/v9"

// The coverage scripts share KEYS and a prelude. KEYS[1] is the coverage
// hash (CoverageKey), KEYS[2] the queue's stats hash, KEYS[3] the events
// stream (EventsKey). The coverage hash holds:
//
//	at        ms (Redis's clock) of the last change accounted for
//	held      one character per run slot, '1' held, '0' free, since at
//	t:<i>     ms of the last take or leave of run slot i
//	left:<i>  ms run slot i was left (or found dead), until its next take
//	pid:<i>   pid of run slot i's holder, from its take until its leave
//
// The time since at is charged to below_k_ms in the stats hash when fewer
// than k slots were held over it: each script charges the interval it ends,
// so any number of callers never count a second twice.
const prelude = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cov = redis.call('HMGET', KEYS[1], 'at', 'held')
local at, prev = tonumber(cov[1]), cov[2] or ''
local function bit(s, i) return string.sub(s, i + 1, i + 1) == '1' end
local function count(s) local _, n = string.gsub(s, '1', '1') return n end
local function setbit(s, i, n, c)
  if #s < n then s = s .. string.rep('0', n - #s) end
  return string.sub(s, 1, i) .. c .. string.sub(s, i + 2)
end
local function charge(k, held, from, to)
  from, to = from or at, to or now
  if from and to > from and held < k then
    redis.call('HINCRBY', KEYS[2], 'below_k_ms', to - from)
  end
end
local function event(keep, ...)
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', keep, '*', ...)
end
`

// takeScript records a take of a run slot: it charges the time since the
// last change, records the gap since the slot's previous holder left (or
// died) in the stats hash when the slot is one of the k kept, and adds a
// took or promoted event.
//
// KEYS as above. ARGV[1] k, ARGV[2] N (run slots), ARGV[3] the slot taken,
// ARGV[4] by: "standby" or "candidate", ARGV[5] pid, ARGV[6] host,
// ARGV[7] the pid of a previous holder that died holding the slot (its
// record was inherited), 0 when none, ARGV[8] events kept, ARGV[9] how
// long the taker saw the slot free, ms (a promoted standby's looks), -1
// when it does not know, ARGV[10..] the gap buckets' upper bounds in ms.
// Returns the gap in ms, -1 when unknown (the slot's first take, or its
// last holder's leave was not recorded).
var takeScript = redis.NewScript(prelude + `
local k, n, slot, by = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local died, free = tonumber(ARGV[7]), tonumber(ARGV[9])
local gap = -1
local left = tonumber(redis.call('HGET', KEYS[1], 'left:' .. slot) or '')
if died > 0 and bit(prev, slot) and at then
  -- its holder died unnoticed, after the last change (it looked every few
  -- seconds while alive); the taker may know when
  gap = math.max(0, now - at)
  if free >= 0 then gap = math.min(gap, free) end
  charge(k, count(prev), at, now - gap)
  charge(k, count(prev) - 1, now - gap, now)
else
  charge(k, count(prev))
  if left then gap = math.max(0, now - left, free) end
end
redis.call('HDEL', KEYS[1], 'left:' .. slot)
redis.call('HSET', KEYS[1], 'at', now, 'held', setbit(prev, slot, n, '1'), 't:' .. slot, now, 'pid:' .. slot, ARGV[5])
local kind = 'took'
if by == 'standby' then kind = 'promoted' end
local ev = {'kind', kind, 'slot', 'run-' .. slot, 'pid', ARGV[5], 'host', ARGV[6]}
if gap >= 0 then
  table.insert(ev, 'gap_ms') table.insert(ev, gap)
  if slot < k then
    local b = #ARGV - 9
    for i = 10, #ARGV do
      if gap <= tonumber(ARGV[i]) then b = i - 10 break end
    end
    redis.call('HINCRBY', KEYS[2], 'gap:' .. by .. ':' .. b, 1)
    redis.call('HINCRBY', KEYS[2], 'gap_sum_ms:' .. by, gap)
  end
end
if died > 0 then table.insert(ev, 'died_pid') table.insert(ev, died) end
event(ARGV[8], unpack(ev))
return gap
`)

// leaveScript records a holder leaving its run slot: it charges the time
// since the last change, notes when the slot was left (the next take's
// gap starts there) and adds a retired or left event.
//
// KEYS as above. ARGV[1] k, ARGV[2] N, ARGV[3] the slot left, ARGV[4] pid,
// ARGV[5] host, ARGV[6] why ("lifetime": a retirement; "stopped",
// "error", "max_jobs", "idle" otherwise), ARGV[7] jobs done, ARGV[8] events kept.
// Returns 1, or 0 and records nothing when another pid took the slot since
// (a holder frozen past its lease, leaving late).
var leaveScript = redis.NewScript(prelude + `
local k, n, slot = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local holder = redis.call('HGET', KEYS[1], 'pid:' .. slot)
if holder and holder ~= ARGV[4] then return 0 end
charge(k, count(prev))
redis.call('HSET', KEYS[1], 'at', now, 'held', setbit(prev, slot, n, '0'), 't:' .. slot, now, 'left:' .. slot, now)
redis.call('HDEL', KEYS[1], 'pid:' .. slot)
local kind = 'left'
if ARGV[6] == 'lifetime' then kind = 'retired' end
event(ARGV[8], 'kind', kind, 'slot', 'run-' .. slot, 'pid', ARGV[4], 'host', ARGV[5], 'why', ARGV[6], 'jobs', ARGV[7])
return 1
`)

// lookScript records what a holder or standby sees of the run slots: it
// charges the time since the last change and takes the slots seen as the
// new state, except a slot taken or left within the last ARGV[6] ms (the
// caller may have read it before that take or leave). A slot held before
// and free now whose holder recorded its take and not its leave died: its
// left time is set and a died event added. (A holder records its leave
// before it lets go of the slot: a look between the two sees the slot
// held, which it still is.)
//
// KEYS as above. ARGV[1] k, ARGV[2] the slots seen ('1' held, '0' free,
// one per run slot), ARGV[3] pid, ARGV[4] host (the looker's),
// ARGV[5] events kept, ARGV[6] trust window, ms. Returns the slots held
// now.
var lookScript = redis.NewScript(prelude + `
local k, seen, trust = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[6])
charge(k, count(prev))
local out = {}
for i = 0, #seen - 1 do
  local c = string.sub(seen, i + 1, i + 1)
  local changed = tonumber(redis.call('HGET', KEYS[1], 't:' .. i) or '0')
  if now - changed < trust then
    c = '0'
    if bit(prev, i) then c = '1' end
  elseif bit(prev, i) and c == '0' and redis.call('HEXISTS', KEYS[1], 'pid:' .. i) == 1 then
    local pid = redis.call('HGET', KEYS[1], 'pid:' .. i)
    redis.call('HSET', KEYS[1], 'left:' .. i, now, 't:' .. i, now)
    redis.call('HDEL', KEYS[1], 'pid:' .. i)
    event(ARGV[5], 'kind', 'died', 'slot', 'run-' .. i, 'pid', pid, 'seen_by', ARGV[3] .. '@' .. ARGV[4])
  end
  out[#out + 1] = c
end
local held = table.concat(out)
redis.call('HSET', KEYS[1], 'at', now, 'held', held)
return count(held)
`)
