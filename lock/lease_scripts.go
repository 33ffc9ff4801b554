package lock

import "github.com/redis/go-redis/v9"

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
// A lease key carries no Redis TTL: an expired lease stays readable, so its
// next holder inherits the record (Slot.Inherited), and N keys per set is
// all there ever is. Numbers are written with string.format('%d'): a Lua
// number handed to redis.call could be formatted with an exponent.

// leaseNow is the Redis clock in unix ms.
const leaseNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// leaseEpoch, the prelude of acquireScript, keeps a failover from granting
// a slot twice. Replication is asynchronous: a grant (or renewal) the old
// master made may never reach the replica that takes over, whose data then
// shows that slot free while its holder runs on. So the queue's epoch key
// (a hash: runid, until) records the run id of the server that last
// granted. A script that finds another run id (a failover, or a restart
// that may have lost its last writes) records the new one and:
//
//   - when lease state from an earlier server exists (the epoch key or the
//     fence counter), refuses every grant until now + TTL on this server's
//     clock: any lease the old server granted and this one lost has
//     expired by then, and its holder has fenced itself (its renewals fail
//     here, and it stops at its renew deadline, below the TTL). Leases this
//     server has are renewed as before.
//   - raises the fence counter to at least now in microseconds (exact in a
//     Lua number until the year 2255), so tokens keep growing even when the
//     counter lost its last increments: they stay above the lost grants'
//     tokens while the servers' clocks agree to better than the time since
//     the last failover.
//
// A refused grant looks like "every lease is live": {-1}. KEYS[#KEYS] is
// the epoch key, KEYS[1] the fence counter, ARGV[1] the TTL (ms); it needs
// leaseNow's now.
const leaseEpoch = `
local epoch = KEYS[#KEYS]
local runid = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
local ep = redis.call('HMGET', epoch, 'runid', 'until')
if ep[1] ~= runid then
  local untl = now
  if ep[1] or redis.call('EXISTS', KEYS[1]) == 1 then untl = now + tonumber(ARGV[1]) end
  if tonumber(redis.call('GET', KEYS[1]) or '0') < now * 1000 then
    redis.call('SET', KEYS[1], string.format('%d', now * 1000))
  end
  redis.call('HSET', epoch, 'runid', runid, 'until', string.format('%d', untl))
  ep[2] = untl
end
if tonumber(ep[2] or 0) > now then return {-1} end
`

// acquireScript grants the first free lease of a set, trying every slot once
// from ARGV[5]: a losing candidate makes this one call. After a failover
// it grants nothing for a TTL (leaseEpoch).
//
// KEYS[1] the fence counter, KEYS[2..#KEYS-1] the set's lease keys in slot
// order, KEYS[#KEYS] the epoch key; ARGV[1] TTL (ms), ARGV[2] owner,
// ARGV[3] host, ARGV[4] pid, ARGV[5] first slot to try (0-based).
// Returns {slot, token, since, expires, previous rec or "", previous host
// or ""} when granted, {-1} when every lease is live or grants are paused.
var acquireScript = redis.NewScript(leaseNow + leaseEpoch + `
local n = #KEYS - 2
local first, ttl = tonumber(ARGV[5]), tonumber(ARGV[1])
for k = 0, n - 1 do
  local i = (first + k) % n
  local key = KEYS[2 + i]
  local l = redis.call('HMGET', key, 'expires', 'rec', 'host')
  if not l[1] or tonumber(l[1]) <= now then
    local token = redis.call('INCR', KEYS[1])
    redis.call('DEL', key)
    redis.call('HSET', key, 'owner', ARGV[2], 'token', token, 'host', ARGV[3], 'pid', ARGV[4],
      'since', string.format('%d', now), 'expires', string.format('%d', now + ttl))
    return {i, token, now, now + ttl, l[2] or '', l[3] or ''}
  end
end
return {-1}
`)

// renewScript extends a live lease that is still this owner's by TTL from
// now. An expired lease is never renewed, even when nobody took it: its
// holder has already fenced itself.
//
// KEYS[1] lease; ARGV[1] owner, ARGV[2] TTL (ms).
// Returns the new expiry (unix ms), 0 when the lease is not ours or expired.
var renewScript = redis.NewScript(leaseNow + `
local l = redis.call('HMGET', KEYS[1], 'owner', 'expires')
if l[1] ~= ARGV[1] or tonumber(l[2]) <= now then return 0 end
local exp = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'expires', string.format('%d', exp))
return exp
`)

// releaseScript deletes a lease that is still this owner's and tells the
// set's watchers (PUBLISH), so a standby on any host wakes at once.
//
// KEYS[1] lease; ARGV[1] owner, ARGV[2] channel.
// Returns 1 when released, 0 when it was not ours.
var releaseScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], KEYS[1])
return 1
`)

// publishScript stores the holder's record in a lease that is still this
// owner's and live.
//
// KEYS[1] lease; ARGV[1] owner, ARGV[2] record (JSON).
// Returns 1 when stored, 0 when the lease is not ours or expired.
var publishScript = redis.NewScript(leaseNow + `
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

// pausedScript reads until when grants are paused after a failover
// (leaseEpoch), on Redis' clock.
//
// KEYS[1] the epoch key.
// Returns {now, until} (unix ms; until is 0 when never paused).
var pausedScript = redis.NewScript(leaseNow + `
return {now, tonumber(redis.call('HGET', KEYS[1], 'until') or '0')}
`)
