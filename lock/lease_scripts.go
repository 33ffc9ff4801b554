package lock

import (
	"github.com/baton-run/baton/internal/script"
	"github.com/redis/go-redis/v9"
)

// The lease scripts judge expiry on Redis' own clock (TIME, read inside the
// script), never on a client's. A lease is a hash:
//
//	owner    random id of this tenure (the holder's alone)
//	token    fencing token: INCR of the queue's one fence counter at grant
//	host     holder's host; pid its pid
//	since    grant time, unix ms on Redis' clock
//	expires  unix ms on Redis' clock; at or past it the lease is free
//	rec      the holder's published Record, JSON
//
// Each lease's expiry is mirrored in the queue's epoch key (mirrorLua), so
// that a lease key deleted on its own does not free its slot early.
//
// A lease key carries no Redis TTL: an expired lease stays readable, so its
// next holder inherits the record (Slot.Inherited), and N keys per set is
// all there ever is. Numbers are written with string.format('%d'): a Lua
// number handed to redis.call could be formatted with an exponent.
//
// The scripts that write (grant, renew, release, hand over, publish) carry
// the allow-oom flag (script.AllowOOM): at maxmemory Redis still runs
// them, so holders keep their leases and work what is queued, as with flock
// slots. What they write is bounded: a few fields per lease, N leases, the
// fence counter, the config and epoch hashes, one line member per standby.

// leaseNow is the Redis clock in unix ms.
const leaseNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// epochLua defines epochPaused(epoch, fence, ttl), which keeps a failover,
// a restart or a loss of data from granting a slot twice; every script that
// grants a lease (acquire, a release's hand-over, a standby's turn) calls
// it before it takes a token. Replication is asynchronous: a grant (or
// renewal) the old master made may never reach the replica that takes
// over, whose data then shows that slot free while its holder runs on; a
// server restarted without persistence has lost every lease, and so has
// one that runs on after a FLUSHALL, a FLUSHDB or a DEL of baton's keys,
// with the same run id and uptime. So the queue's epoch key (a hash:
// runid, until, and the leases' mirrors, mirrorLua) records the run id of the server that last granted (INFO
// server, read in the script: no extra round trip); it is written by the
// first grant (or MarkFresh) and never removed by baton, so its absence,
// or the fence counter's, means this server lost what it knew, or never
// served the queue, which it cannot tell apart. A script that finds
// another run id (a failover, a restart), or no epoch key or no fence
// counter (a loss of data, a restart without persistence, a server never
// used and not marked fresh), records this server's run id and:
//
//   - refuses every grant of a free lease until now + TTL on this server's
//     clock: any lease the old state granted and this server lost has
//     expired by then, and its holder has fenced itself (its renewals fail
//     here, and it stops at its renew deadline, below the TTL, after its
//     last successful renewal, which came before the loss, so before now).
//     Leases this server has are renewed, and handed over by their
//     holders, as before. MarkFresh writes the epoch key and the counter
//     on a server just started, so its first grants are not paused; a
//     loss takes the mark with it.
//   - raises the fence counter to at least now in microseconds (exact in a
//     Lua number until the year 2255), so tokens keep growing even when the
//     counter lost its last increments, or all of them: they stay above the
//     lost grants' tokens while the servers' clocks agree to better than
//     the time since the last failover (one token per µs at most).
//
// epochPaused returns true while grants are paused. It needs leaseNow's now.
const epochLua = `
local function epochPaused(epoch, fence, ttl)
  local runid = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  local ep = redis.call('HMGET', epoch, 'runid', 'until')
  if ep[1] ~= runid or redis.call('EXISTS', fence) == 0 then
    local untl = now + ttl
    if tonumber(redis.call('GET', fence) or '0') < now * 1000 then
      redis.call('SET', fence, string.format('%d', now * 1000))
    end
    redis.call('HSET', epoch, 'runid', runid, 'until', string.format('%d', untl))
    ep[2] = untl
  end
  return tonumber(ep[2] or 0) > now
end
`

// mirrorLua mirrors each lease's expiry in the epoch hash (field: the
// lease's key, value: its expiry, unix ms): every grant and renewal writes
// it, a release removes it. A lease key deleted on its own (an operator's
// DEL) while its lease was valid leaves the mirror ahead of Redis' clock,
// and the slot is not free until then, by when its holder, whose renewals
// fail, has fenced itself. A loss of the epoch key itself pauses every
// grant (epochLua). It needs leaseNow's now and EPOCH, the epoch key.
const mirrorLua = `
local function mirrorLive(key)
  return tonumber(redis.call('HGET', EPOCH, key) or '0') > now
end
local function mirror(key, exp)
  if exp then
    redis.call('HSET', EPOCH, key, string.format('%d', exp))
  else
    redis.call('HDEL', EPOCH, key)
  end
end
`

// freshScript records, on a server that holds none of the queue's lease
// state, that it never served the queue: the epoch key gets its run id
// and no pause, the fence counter its clock in µs (epochLua).
//
// KEYS[1] the epoch key, KEYS[2] the fence counter.
// Returns 1 when recorded, 0 when lease state existed (nothing written).
var freshScript = redis.NewScript(leaseNow + `
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local runid = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
redis.call('HSET', KEYS[1], 'runid', runid, 'until', '0')
redis.call('SET', KEYS[2], string.format('%d', now * 1000))
return 1
`)

// The fleet's config, baton:{queue}:lease:config, is a hash of the settings
// every holder of the queue must share (slots, standby_slots, lease_ttl,
// lease_renew: LeaseOptions.Agree) and "expires", the latest expiry of any
// lease granted or renewed under them. While that expiry is ahead of Redis'
// clock a lease may still be valid under the old settings, so a candidate
// with other values is refused; once it has passed, every such lease has
// ended and the next grant writes its own settings.

// configLua defines cfgLive(key), whether the fleet's config is in force,
// and cfgExtend(key, exp), which keeps it in force until at least exp.
const configLua = `
local function cfgLive(key)
  local e = redis.call('HGET', key, 'expires')
  return e and tonumber(e) > now
end
local function cfgExtend(key, exp)
  local e = tonumber(redis.call('HGET', key, 'expires') or '0')
  if exp > e then redis.call('HSET', key, 'expires', string.format('%d', exp)) end
end
`

// acquireScript grants the first free lease of a set (expired or missing,
// and its mirror too: mirrorLua), trying every slot once
// from ARGV[5], or, when every lease of the set is live, of a second set
// (a run set's standbys) from ARGV[7]: a losing candidate makes this one
// call. A candidate whose settings differ from the fleet's config in force
// is refused first, free lease or not; the first grant after the config
// lapsed writes the candidate's settings. After a failover or a loss of
// data it grants nothing for a TTL (epochLua).
//
// KEYS[1] the fence counter, KEYS[2] the fleet's config, KEYS[3] the epoch
// key, KEYS[4..] the first set's lease keys in slot order, then the second set's (none for a
// single set); ARGV[1] TTL (ms), ARGV[2] owner, ARGV[3] host, ARGV[4] pid,
// ARGV[5] first slot to try (0-based), ARGV[6] the first set's size,
// ARGV[7] the second set's first slot to try, ARGV[8..] the candidate's
// settings as name, value pairs.
// Returns {slot, token, since, expires, previous rec or "", previous host
// or "", set (0 first, 1 second)} when granted, {-1} when every lease is
// live or grants are paused, {-2, name, the fleet's value} when a setting differs from the
// fleet's config in force.
var acquireScript = script.AllowOOM(leaseNow + configLua + epochLua + `
local EPOCH = KEYS[3]
` + mirrorLua + `
local ttl, nfirst = tonumber(ARGV[1]), tonumber(ARGV[6])
local live = cfgLive(KEYS[2])
if live then
  for j = 8, #ARGV, 2 do
    local v = redis.call('HGET', KEYS[2], ARGV[j])
    if v and v ~= ARGV[j + 1] then return {-2, ARGV[j], v} end
  end
end
if epochPaused(KEYS[3], KEYS[1], ttl) then return {-1} end
local sets = {{4, nfirst, tonumber(ARGV[5])}, {4 + nfirst, #KEYS - 3 - nfirst, tonumber(ARGV[7])}}
for s = 1, 2 do
  local base, n, first = sets[s][1], sets[s][2], sets[s][3]
  for k = 0, n - 1 do
    local i = (first + k) % n
    local key = KEYS[base + i]
    local l = redis.call('HMGET', key, 'expires', 'rec', 'host')
    if (not l[1] or tonumber(l[1]) <= now) and not mirrorLive(key) then
      local token = redis.call('INCR', KEYS[1])
      redis.call('DEL', key)
      redis.call('HSET', key, 'owner', ARGV[2], 'token', token, 'host', ARGV[3], 'pid', ARGV[4],
        'since', string.format('%d', now), 'expires', string.format('%d', now + ttl))
      mirror(key, now + ttl)
      if not live then redis.call('DEL', KEYS[2]) end
      for j = 8, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[j], ARGV[j + 1]) end
      cfgExtend(KEYS[2], now + ttl)
      return {i, token, now, now + ttl, l[2] or '', l[3] or '', s - 1}
    end
  end
end
return {-1}
`)

// renewScript extends a live lease that is still this owner's by TTL from
// now, and the fleet's config with it. An expired lease is never renewed,
// even when nobody took it: its holder has already fenced itself.
//
// KEYS[1] lease, KEYS[2] the fleet's config, KEYS[3] the epoch key (its
// mirror, mirrorLua); ARGV[1] owner, ARGV[2] TTL (ms).
// Returns the new expiry (unix ms), 0 when the lease is not ours or expired.
var renewScript = script.AllowOOM(leaseNow + configLua + `
local EPOCH = KEYS[3]
` + mirrorLua + `
local l = redis.call('HMGET', KEYS[1], 'owner', 'expires')
if l[1] ~= ARGV[1] or tonumber(l[2]) <= now then return 0 end
local exp = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'expires', string.format('%d', exp))
mirror(KEYS[1], exp)
cfgExtend(KEYS[2], exp)
return exp
`)

// releaseScript deletes a lease that is still this owner's, and its
// mirror (mirrorLua).
//
// KEYS[1] lease, KEYS[2] the epoch key; ARGV[1] owner.
// Returns 1 when released, 0 when it was not ours.
var releaseScript = script.AllowOOM(`
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[2], KEYS[1])
return 1
`)

// The line of standbys, baton:{queue}:lease:waiting, is a sorted set: a
// member "<standby slot>:<owner>" per standby waiting for a run slot, its
// score the Redis time (µs) it joined, or just after the last to join. A
// run lease is handed to the oldest
// member whose standby lease is live and still its own (members left by a
// standby that died or timed out are dropped as they come up): a new token,
// the standby as owner (its standby lease's owner id, host and pid), TTL
// from now, and a PUBLISH on baton:{queue}:lease:wake:<owner> that wakes it
// at once. The member leaves the line in the same step, so a standby is
// handed at most one run lease per turn in line. The grant replaces a lease
// that is its releasing holder's own or has expired: never a valid one of
// anyone else, so no more than N run leases are ever valid.

// lineLua defines handOver(runKey, i, ttl, prev): it hands run lease i (key
// runKey) to the oldest live standby in line, with prev, the previous
// holder's record, when it died holding the lease, and returns the
// standby's owner, or nil when nobody live is waiting. The script sets
// LINE (the line's key), FENCE, CFG (the fleet's config), EPOCH (the epoch
// key), SB (the index in KEYS of standby lease 0), NSB (the number of
// standby leases) and WAKE (the wake channel prefix) first, and includes
// mirrorLua.
const lineLua = `
local function handOver(runKey, i, ttl, prev)
  while true do
    local m = redis.call('ZRANGE', LINE, 0, 0)[1]
    if not m then return nil end
    redis.call('ZREM', LINE, m)
    local j, owner = string.match(m, '^(%d+):(.+)$')
    j = tonumber(j)
    if j and j < NSB then
      local s = redis.call('HMGET', KEYS[SB + j], 'owner', 'expires', 'host', 'pid')
      if s[1] == owner and s[2] and tonumber(s[2]) > now then
        local token = redis.call('INCR', FENCE)
        redis.call('DEL', runKey)
        redis.call('HSET', runKey, 'owner', owner, 'token', token, 'host', s[3] or '', 'pid', s[4] or '0',
          'since', string.format('%d', now), 'expires', string.format('%d', now + ttl))
        if prev and prev ~= '' then redis.call('HSET', runKey, 'prev', prev) end
        mirror(runKey, now + ttl)
        cfgExtend(CFG, now + ttl)
        redis.call('PUBLISH', WAKE .. owner, i)
        return owner
      end
    end
  end
end
`

// handOverScript is a run lease's release: when the lease is still this
// owner's it goes to the oldest live standby in line, in this one step;
// with nobody live waiting it is deleted (free for any candidate). A lease
// already past its expiry is free, so handing it over is a grant: while
// grants are paused after a failover or a loss of data (epochLua) it is
// deleted instead.
//
// KEYS[1] the run lease, KEYS[2] the fence counter, KEYS[3] the line,
// KEYS[4] the fleet's config, KEYS[5] the epoch key, KEYS[6..] the standby
// leases in slot order;
// ARGV[1] owner, ARGV[2] TTL (ms), ARGV[3] the wake channel prefix,
// ARGV[4] the run lease's slot.
// Returns 2 when handed over, 1 when released, 0 when it was not ours.
var handOverScript = script.AllowOOM(leaseNow + configLua + epochLua + `
local LINE, FENCE, CFG, EPOCH, SB, NSB, WAKE = KEYS[3], KEYS[2], KEYS[4], KEYS[5], 6, #KEYS - 5, ARGV[3]
` + mirrorLua + lineLua + `
local l = redis.call('HMGET', KEYS[1], 'owner', 'expires')
if l[1] ~= ARGV[1] then return 0 end
if epochPaused(KEYS[5], FENCE, tonumber(ARGV[2])) and tonumber(l[2] or '0') <= now then
  redis.call('DEL', KEYS[1])
  mirror(KEYS[1], nil)
  return 1
end
if handOver(KEYS[1], ARGV[4], tonumber(ARGV[2])) then return 2 end
redis.call('DEL', KEYS[1])
mirror(KEYS[1], nil)
return 1
`)

// turnScript is a standby's turn in line: it joins the line (ARGV[4]
// "join"), looks ("look") or leaves it ("leave"); unless leaving, it hands
// every free run lease (expired or missing, and its mirror: mirrorLua) to
// the oldest live standbys in line, unless grants are paused after a
// failover or a loss of data (epochLua); then, if a run lease is this
// standby's, it renews it (TTL from now) and returns it.
//
// KEYS[1] the fence counter, KEYS[2] the line, KEYS[3] the fleet's config,
// KEYS[4] the epoch key, KEYS[5..4+ARGV[5]] the run leases in slot order,
// then the standby leases in slot order; ARGV[1] TTL (ms), ARGV[2] the wake channel prefix,
// ARGV[3] this standby's member ("<standby slot>:<owner>"), ARGV[4] the
// mode, ARGV[5] the number of run leases, ARGV[6] this standby's owner.
// Returns {run slot, token, since, expires, previous holder's rec or ""}
// when a run lease is this standby's, else {-1}.
var turnScript = script.AllowOOM(leaseNow + configLua + epochLua + `
local nrun = tonumber(ARGV[5])
local LINE, FENCE, CFG, EPOCH, SB, NSB, WAKE = KEYS[2], KEYS[1], KEYS[3], KEYS[4], 5 + nrun, #KEYS - 4 - nrun, ARGV[2]
local ttl = tonumber(ARGV[1])
` + mirrorLua + lineLua + `
if ARGV[4] == 'join' then
  -- in µs of Redis' clock, and after the last to join: a strict order
  local t = redis.call('TIME')
  local at = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = redis.call('ZRANGE', LINE, -1, -1, 'WITHSCORES')[2]
  if last and tonumber(last) >= at then at = tonumber(last) + 1 end
  redis.call('ZADD', LINE, 'NX', string.format('%d', at), ARGV[3])
elseif ARGV[4] == 'leave' then
  redis.call('ZREM', LINE, ARGV[3])
end
if ARGV[4] ~= 'leave' and not epochPaused(KEYS[4], FENCE, ttl) then
  for i = 0, nrun - 1 do
    local l = redis.call('HMGET', KEYS[5 + i], 'expires', 'rec')
    if (not l[1] or tonumber(l[1]) <= now) and not mirrorLive(KEYS[5 + i]) then
      if not handOver(KEYS[5 + i], i, ttl, l[2]) then break end
    end
  end
end
for i = 0, nrun - 1 do
  local l = redis.call('HMGET', KEYS[5 + i], 'owner', 'expires', 'token', 'since', 'prev')
  if l[1] == ARGV[6] and tonumber(l[2]) > now then
    redis.call('HSET', KEYS[5 + i], 'expires', string.format('%d', now + ttl))
    mirror(KEYS[5 + i], now + ttl)
    cfgExtend(CFG, now + ttl)
    return {i, tonumber(l[3]), tonumber(l[4]), now + ttl, l[5] or ''}
  end
end
return {-1}
`)

// publishScript stores the holder's record in a lease that is still this
// owner's and live.
//
// KEYS[1] lease; ARGV[1] owner, ARGV[2] record (JSON).
// Returns 1 when stored, 0 when the lease is not ours or expired.
var publishScript = script.AllowOOM(leaseNow + `
local l = redis.call('HMGET', KEYS[1], 'owner', 'expires')
if l[1] ~= ARGV[1] or tonumber(l[2]) <= now then return 0 end
redis.call('HSET', KEYS[1], 'rec', ARGV[2])
return 1
`)

// recordsScript reads every lease of a set at one instant of Redis' clock.
//
// KEYS: the lease keys in slot order.
// Returns {now, then per key: rec, token, host, pid, since, expires}
// (nil for a missing field).
var recordsScript = redis.NewScript(leaseNow + `
local out = {now}
for i = 1, #KEYS do
  local l = redis.call('HMGET', KEYS[i], 'rec', 'token', 'host', 'pid', 'since', 'expires')
  for j = 1, 6 do out[#out + 1] = l[j] end
end
return out
`)

// pausedScript reads until when grants are paused after a failover or a loss
// (epochLua), on Redis' clock.
//
// KEYS[1] the epoch key.
// Returns {now, until} (unix ms; until is 0 when never paused).
var pausedScript = redis.NewScript(leaseNow + `
return {now, tonumber(redis.call('HGET', KEYS[1], 'until') or '0')}
`)

// lineScript reads the line of standbys (baton:{queue}:lease:waiting) at
// one instant of Redis' clock, writing nothing: the members whose standby
// lease is live and still theirs, oldest first, which is the order the
// hand-over serves them in. Members left by a standby that died or timed
// out are skipped (the hand-over drops them as they come up) and counted.
//
// KEYS[1] the line, KEYS[2..] the standby leases in slot order.
// Returns {now (µs), skipped, then per live member: standby slot, host,
// pid, joined (µs)}.
var lineScript = redis.NewScript(leaseNow + `
local out = {string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2])), 0}
local m = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for k = 1, #m, 2 do
  local j, owner = string.match(m[k], '^(%d+):(.+)$')
  j = tonumber(j)
  local s = {}
  if j and j + 2 <= #KEYS then s = redis.call('HMGET', KEYS[j + 2], 'owner', 'expires', 'host', 'pid') end
  if s[1] == owner and s[2] and tonumber(s[2]) > now then
    for _, v in ipairs({j, s[3] or '', s[4] or '0', m[k + 1]}) do out[#out + 1] = v end
  else
    out[2] = out[2] + 1
  end
end
return out
`)
