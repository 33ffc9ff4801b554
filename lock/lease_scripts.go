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

// acquireScript grants the first free lease of a set, trying every slot once
// from ARGV[5]: a losing candidate makes this one call. A candidate whose
// settings differ from the fleet's config in force is refused first, free
// lease or not; the first grant after the config lapsed writes the
// candidate's settings.
//
// KEYS[1] the fence counter, KEYS[2] the fleet's config, KEYS[3..] the set's
// lease keys in slot order; ARGV[1] TTL (ms), ARGV[2] owner, ARGV[3] host,
// ARGV[4] pid, ARGV[5] first slot to try (0-based), ARGV[6..] the
// candidate's settings as name, value pairs.
// Returns {slot, token, since, expires, previous rec or "", previous host
// or ""} when granted, {-1} when every lease is live, {-2, name, the fleet's
// value} when a setting differs from the fleet's config in force.
var acquireScript = redis.NewScript(leaseNow + configLua + `
local n = #KEYS - 2
local first, ttl = tonumber(ARGV[5]), tonumber(ARGV[1])
local live = cfgLive(KEYS[2])
if live then
  for j = 6, #ARGV, 2 do
    local v = redis.call('HGET', KEYS[2], ARGV[j])
    if v and v ~= ARGV[j + 1] then return {-2, ARGV[j], v} end
  end
end
for k = 0, n - 1 do
  local i = (first + k) % n
  local key = KEYS[3 + i]
  local l = redis.call('HMGET', key, 'expires', 'rec', 'host')
  if not l[1] or tonumber(l[1]) <= now then
    local token = redis.call('INCR', KEYS[1])
    redis.call('DEL', key)
    redis.call('HSET', key, 'owner', ARGV[2], 'token', token, 'host', ARGV[3], 'pid', ARGV[4],
      'since', string.format('%d', now), 'expires', string.format('%d', now + ttl))
    if not live then redis.call('DEL', KEYS[2]) end
    for j = 6, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[j], ARGV[j + 1]) end
    cfgExtend(KEYS[2], now + ttl)
    return {i, token, now, now + ttl, l[2] or '', l[3] or ''}
  end
end
return {-1}
`)

// renewScript extends a live lease that is still this owner's by TTL from
// now, and the fleet's config with it. An expired lease is never renewed,
// even when nobody took it: its holder has already fenced itself.
//
// KEYS[1] lease, KEYS[2] the fleet's config; ARGV[1] owner, ARGV[2] TTL (ms).
// Returns the new expiry (unix ms), 0 when the lease is not ours or expired.
var renewScript = redis.NewScript(leaseNow + configLua + `
local l = redis.call('HMGET', KEYS[1], 'owner', 'expires')
if l[1] ~= ARGV[1] or tonumber(l[2]) <= now then return 0 end
local exp = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'expires', string.format('%d', exp))
cfgExtend(KEYS[2], exp)
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
