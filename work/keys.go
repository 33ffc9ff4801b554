package work

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Group is the consumer group every holder reads through.
const Group = "baton"

// Stream entry fields. Producers set PayloadField (and may add fields of
// their own, which baton carries through retries, give-backs and dead
// letters); baton adds the others when it moves a job back into the stream.
// Field names baton uses itself are reserved (docs/jobs.md lists them): a
// producer's value that baton never writes (an attempts count out of range,
// an orig that is not a job id or is newer than its entry) makes the entry
// malformed, and a producer's field of the same name is overwritten on a
// move.
const (
	PayloadField  = "payload"
	attemptsField = "attempts" // runs already made
	jobField      = "orig"     // the job's id for life: the id of its first entry
)

// Dead-letter fields, beside the job's own fields.
const (
	deadReason   = "reason"
	deadError    = "error"
	deadEntry    = "id" // the job's last stream entry id
	deadFailedAt = "failed_at"
)

// Keys are the Redis keys of one queue, all under the hash tag {queue} so a
// cluster keeps them on one shard and scripts may touch them together.
type Keys struct {
	Stream        string // baton:{q}: the jobs (of normal priority); group "baton"
	High, Low     string // baton:{q}:high, baton:{q}:low: jobs of those priorities; group "baton"
	Retry         string // baton:{q}:retry: sorted set of job ids, scored by due time (ms)
	RetryJobs     string // baton:{q}:retry:jobs: hash job id → the job's fields (MessagePack)
	Scheduled     string // baton:{q}:scheduled: delayed jobs, as Retry
	ScheduledJobs string // baton:{q}:scheduled:jobs: as RetryJobs
	Dead          string // baton:{q}:dead: dead letters
	DeadIndex     string // baton:{q}:dead:ids: hash job id → its dead letter's id
	Stats         string // baton:{q}:stats: totals that outlive short-lived holders
	Rate          string // baton:{q}:rate: the rate limiter's state
	RateLog       string // baton:{q}:rate:log: jobs granted per second, the last few seconds
	Done          string // baton:{q}:done: sorted set of done job ids, scored by when done (ms); written only when retention > 0
	Paused        string // baton:{q}:paused: hash (by, host, at, reason) while the queue is paused; a PX expiry with pause --for
	Cancel        string // baton:{q}:cancel: hash job id → why, cancels of running jobs for their holders; expires an hour after the last
	Results       string // baton:{q}:results: hash job id → result, of done jobs in Done; written only when retention > 0
	Waiters       string // baton:{q}:waiters: hash job id → waiters (Wait); each gets the outcome on the list Waiters+":"+job id
	Progress      string // baton:{q}:progress: hash job id → the running job's progress (JSON)
}

// KeysFor returns the keys of queue q.
func KeysFor(q string) Keys {
	base := "baton:{" + q + "}"
	return Keys{Stream: base, High: base + ":high", Low: base + ":low", Retry: base + ":retry", RetryJobs: base + ":retry:jobs",
		Scheduled: base + ":scheduled", ScheduledJobs: base + ":scheduled:jobs",
		Dead: base + ":dead", DeadIndex: base + ":dead:ids", Stats: base + ":stats", Rate: base + ":rate", RateLog: base + ":rate:log",
		Done: base + ":done", Paused: base + ":paused", Cancel: base + ":cancel",
		Results: base + ":results", Waiters: base + ":waiters", Progress: base + ":progress"}
}

// Unique is the key that holds the id of the job queued under a unique key.
func (k Keys) Unique(key string) string { return k.Stream + ":unique:" + key }

func isNoGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOGROUP")
}

func isRedisNil(err error) bool { return errors.Is(err, redis.Nil) }

// The scripts below follow one rule, the move order: a job's destination is
// written first and its stream entry acknowledged last, and each script
// checks first that the entry is still pending, for this consumer where it
// matters. A script refused or failing part way (a key of the wrong type,
// OOM) has then written nothing, or only the destination: the entry stays
// pending and is settled again later. Nothing is ever acknowledged into
// nowhere. Statistics are written with pcall: they never fail a move.
//
// Redis runs a script that has written once to its end even under OOM, so a
// destination written under OOM is followed by its acknowledgement.

// entryLua holds Lua helpers shared by the scripts: job(stream, id) returns
// an entry's fields with baton's bookkeeping fields taken out (nil when the
// entry is gone), and put(t, k, v) appends a field.
const entryLua = `
local function fields(stream, id, drop)
  local e = redis.call('XRANGE', stream, id, id)
  if #e == 0 then return nil end
  local f, out = e[1][2], {}
  for i = 1, #f, 2 do
    if not drop[f[i]] then out[#out + 1] = f[i]; out[#out + 1] = f[i + 1] end
  end
  return out
end
local function put(t, k, v) t[#t + 1] = k; t[#t + 1] = v end
local baton = {attempts = true, orig = true}
-- writable refuses, before anything is written, a destination key that holds
-- another type (pairs of key, type): a move then writes nothing at all.
local function writable(...)
  local a = {...}
  for i = 1, #a, 2 do
    local t = redis.call('TYPE', a[i])['ok']
    if t ~= 'none' and t ~= a[i + 1] then
      return redis.error_reply('WRONGTYPE ' .. a[i] .. ' holds a ' .. t .. ', not a ' .. a[i + 1])
    end
  end
end
-- release frees a unique key if it still names this job.
local function release(key, job)
  if redis.call('GET', key) == job then redis.call('DEL', key) end
end
local letter = {attempts = true, orig = true, reason = true, error = true, id = true, failed_at = true}
local function pending(stream, group, id, consumer)
  if consumer then
    return #redis.call('XPENDING', stream, group, id, id, 1, consumer) > 0
  end
  return #redis.call('XPENDING', stream, group, id, id, 1) > 0
end
-- trim drops the n oldest dead letters of dead (dead_max), and their
-- entries in the dead index where it still names them.
local function trim(dead, index, n)
  if n <= 0 then return end
  for _, e in ipairs(redis.call('XRANGE', dead, '-', '+', 'COUNT', n)) do
    local g = e[2]
    for i = 1, #g, 2 do
      if g[i] == 'orig' and redis.call('HGET', index, g[i + 1]) == e[1] then
        redis.call('HDEL', index, g[i + 1])
      end
    end
    redis.call('XDEL', dead, e[1])
  end
end
`

// ackScript acknowledges and deletes entries in one step, so an entry is never
// deleted while still pending (a ghost) nor acked and left in the stream,
// frees the unique keys of the jobs that had one, and adds the batch to the
// totals and the duration histogram. XACK and XDEL free memory, so this runs
// under OOM too.
//
// With a retention, it then records each job as done: its job id in the
// done set scored by Redis' clock (ms), records older than the retention
// dropped, the oldest beyond retention_max dropped, and the set set to
// expire after the retention, so an idle queue's records vanish. Like the
// statistics, these writes (after the acknowledgement) never fail the ack.
//
// Results (result.go) come last, only for jobs that set one: kept, with a
// retention, in the results hash beside the done records, and trimmed with
// them. Waiters (Wait) get each job's outcome: one EXISTS per call when
// nobody waits.
//
// KEYS[1] stream, KEYS[2] stats, KEYS[3] done, KEYS[4] waiters, KEYS[5]
// results, KEYS[6..] unique keys;
// ARGV[1] group, ARGV[2] n, ARGV[3] h, ARGV[4] retention (ms; 0: record
// nothing), ARGV[5] retention_max, ARGV[6..5+n] entry ids, then h
// field/increment pairs for the stats hash, then one job id per unique key,
// then, with a retention, the n entries' job ids, then pairs of job id and
// result for the jobs that set a result.
// Returns how many entries were pending and are now acknowledged. A key
// stream (KEYS[1]) left with no entry is deleted (keyStreamLua).
const ackLua = notifyLua + chainAckLua + keyStreamLua + ackBodyLua

// ackBodyLua is ackLua after its helpers: one batch of one stream.
const ackBodyLua = `
local n, h = tonumber(ARGV[2]), tonumber(ARGV[3])
local ids = {}
for i = 6, 5 + n do ids[#ids + 1] = ARGV[i] end
local keep = tonumber(ARGV[4])
local u = 6 + n + 2 * h
local res = u + #KEYS - 5 + (keep > 0 and n or 0) -- the first result pair
-- One EXISTS per call when no waiter, result or chain is about (the hot
-- path); a closer look only when one is.
local awaited = string.sub(KEYS[2], 1, #KEYS[2] - 6) .. ':awaited'
local any = redis.call('EXISTS', KEYS[4], KEYS[5], awaited) > 0
local extra = any and redis.call('EXISTS', KEYS[4], KEYS[5]) > 0 -- waiters, or results to trim
if extra and redis.call('EXISTS', KEYS[4]) == 1 then
  local r = {}
  for i = res, #ARGV, 2 do r[ARGV[i]] = ARGV[i + 1] end
  for _, id in ipairs(ids) do
    local job = jobOf(KEYS[1], id)
    if job then notify(KEYS[4], job, 'done\n' .. (r[job] or '')) end
  end
end
local chained = any and chainSettling(KEYS[1], KEYS[2], ids)
local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
if not trimAcked(KEYS[1], ARGV[1], ids) then redis.call('XDEL', KEYS[1], unpack(ids)) end
dropEmptyKeyStream(KEYS[1])
for i = 6, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[u + i - 6] then redis.call('DEL', KEYS[i]) end
end
if acked > 0 then
  redis.pcall('HINCRBY', KEYS[2], 'done', acked)
end
if acked == n then
  -- The durations are of the whole batch: counted only when all of it was
  -- still pending, never twice for a job another holder claimed and settled
  -- first (rare: the histogram may then miss this batch's share).
  for i = 6 + n, 5 + n + 2 * h, 2 do redis.pcall('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1]) end
end
if keep > 0 then
  -- Every job of the batch ran to success here, acked by this call or not
  -- (claimed meanwhile by another holder): each is recorded. Locate looks
  -- at the done set last, so a later state (running again, retrying,
  -- dead) wins over the record.
  local t = redis.call('TIME')
  local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  local z, j = {}, u + #KEYS - 5
  for i = j, j + n - 1 do z[#z + 1] = now; z[#z + 1] = ARGV[i] end
  redis.pcall('ZADD', KEYS[3], unpack(z))
  if res <= #ARGV then
    for i = res, #ARGV, 2 do redis.pcall('HSET', KEYS[5], ARGV[i], ARGV[i + 1]) end
    redis.pcall('PEXPIRE', KEYS[5], keep)
    extra = true
  end
  if extra and redis.call('EXISTS', KEYS[5]) == 1 then
    -- the results of the records dropped below go with them
    local cut = '(' .. string.format('%d', tonumber(now) - keep)
    local old = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', cut)
    local over = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[5])
    if over > 0 then
      for _, m in ipairs(redis.call('ZRANGE', KEYS[3], 0, over - 1)) do old[#old + 1] = m end
    end
    for i = 1, #old, 1000 do redis.pcall('HDEL', KEYS[5], unpack(old, i, math.min(i + 999, #old))) end
  end
  redis.pcall('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. string.format('%d', tonumber(now) - keep))
  redis.pcall('ZREMRANGEBYRANK', KEYS[3], 0, -1 - tonumber(ARGV[5]))
  redis.pcall('PEXPIRE', KEYS[3], keep)
end
if chained then chainDone(chained) end
return acked
`

var ackScript = redis.NewScript(ackLua)

// keyAckScript is ackScript for several streams in one call: the batches
// of the key streams a holder settles at once (a turn reads up to a
// quantum from each of several keys), which one call each would cost a
// script call for every few jobs. Each batch is acknowledged exactly as
// ackScript would, in order; then the acknowledged jobs' index entries
// (KeyJobs) are dropped: at once for a batch whose entries this call all
// acknowledged (a job's pending entry is its newest: every script that
// gives it a new one acknowledges the old one first), else where they
// still name the acknowledged entry (a late ack, after a claim, a retry
// and a new entry).
//
// KEYS: each batch's ackScript KEYS, one batch after another, then the
// key jobs index; ARGV[1] the number of batches b, ARGV[2..1+3b] per batch
// its number of KEYS, of ARGV and of index pairs, then each batch's
// ackScript ARGV, one after another, then each batch's pairs of job id and
// entry id, one batch after another.
// Returns how many entries were pending and are now acknowledged.
var keyAckScript = redis.NewScript(keyAckLua)

const keyAckLua = notifyLua + chainAckLua + keyStreamLua + "local function ackOne()\n" + ackBodyLua + `
end
local allK, allA = {}, {}
for i = 1, #KEYS do allK[i] = KEYS[i] end
for i = 1, #ARGV do allA[i] = ARGV[i] end
local b = tonumber(allA[1])
local ko, ao, acked = 0, 1 + 3 * b, 0
local whole = {} -- per batch: all its entries acknowledged by this call
for i = 1, b do
  local nk, na = tonumber(allA[3 * i - 1]), tonumber(allA[3 * i])
  for j = #KEYS, 1, -1 do KEYS[j] = nil end
  for j = #ARGV, 1, -1 do ARGV[j] = nil end
  for j = 1, nk do KEYS[j] = allK[ko + j] end
  for j = 1, na do ARGV[j] = allA[ao + j] end
  ko, ao = ko + nk, ao + na
  local n = ackOne()
  whole[i] = n == tonumber(ARGV[2])
  acked = acked + n
end
local index, drop, jobs, ents = allK[#allK], {}, {}, {}
for i = 1, b do
  for p = ao + 1, ao + 2 * tonumber(allA[3 * i + 1]), 2 do
    if whole[i] then
      drop[#drop + 1] = allA[p]
    else
      jobs[#jobs + 1], ents[#ents + 1] = allA[p], allA[p + 1]
    end
  end
  ao = ao + 2 * tonumber(allA[3 * i + 1])
end
stillNamed(index, jobs, ents, drop)
for i = 1, #drop, 1000 do redis.call('HDEL', index, unpack(drop, i, math.min(i + 999, #drop))) end
return acked
`

// retryScript moves a failed entry to the retry schedule: its fields (the
// producer's own included) under its job id in the retry hash, the job id in
// the sorted set at its due time, then the acknowledgement.
//
// The due time is the backoff from now on Redis' clock, the clock
// dueScript judges it by.
//
// KEYS[1] stream, KEYS[2] retry, KEYS[3] retry jobs, KEYS[4] stats;
// ARGV[1] group, ARGV[2] entry id, ARGV[3] consumer, ARGV[4] backoff (ms),
// ARGV[5] job id, ARGV[6] runs made, ARGV[7] the stats field of the failure
// ("failed:error", "failed:timeout", "failed:crashed"), ARGV[8..] stats
// field/increment pairs (the run's duration histogram).
// Returns 1 when scheduled, 0 when the entry is no longer pending for this
// consumer, -1 when it was deleted while pending (cleared), -2 when another
// job waits for retry under the same job id (two entries claim it: a
// producer wrote an orig field): nothing written, the entry stays pending.
// A record is never written over: that would lose the job it held.
const retryLua = entryLua + `
if not pending(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
local bad = writable(KEYS[2], 'zset', KEYS[3], 'hash')
if bad then return bad end
local f = fields(KEYS[1], ARGV[2], baton)
if not f then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
  return -1
end
if redis.call('HEXISTS', KEYS[3], ARGV[5]) == 1 then return -2 end
put(f, 'attempts', ARGV[6])
put(f, 'orig', ARGV[5])
redis.call('HSET', KEYS[3], ARGV[5], cmsgpack.pack(f))
local t = redis.call('TIME')
local due = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[4])
redis.call('ZADD', KEYS[2], string.format('%d', due), ARGV[5])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
redis.pcall('HINCRBY', KEYS[4], 'retried', 1)
redis.pcall('HINCRBY', KEYS[4], ARGV[7], 1)
for i = 8, #ARGV, 2 do redis.pcall('HINCRBY', KEYS[4], ARGV[i], ARGV[i + 1]) end
return 1
`

var retryScript = redis.NewScript(retryLua)

// dueScript moves due jobs of the retry and scheduled sets back into the
// stream of their priority as new entries with their fields, attempt count
// and job id: XADD first, then the removal from the set. A retry member of
// the old "<entry id>|<attempts>|<orig>|<payload>" form (written by baton
// before 0.2) is read as such. A member that cannot be moved (a record too
// large to unpack, a stream of the wrong type) is put back a minute later,
// so it never blocks the members behind it; OOM stops the script.
//
// Due is judged on Redis' clock (TIME), never the caller's: in a fleet, a
// host whose clock runs ahead would otherwise move jobs early. The script
// is not fenced: any running holder may move due jobs (a stale one too),
// each member moves once (XADD and ZREM in one step), and it touches no
// pending entry.
//
// KEYS[1] stream, KEYS[2] high stream, KEYS[3] low stream, then pairs: a
// sorted set and its hash of records; ARGV[1] most to move per set.
// Returns {moved, could not move, 1 when the high or low stream exists}.
var dueScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local level = {high = KEYS[2], low = KEYS[3]}
local function move(set, records, m)
  local packed = redis.call('HGET', records, m)
  if packed then
    local f = cmsgpack.unpack(packed)
    local to = KEYS[1]
    for i = 1, #f, 2 do
      if f[i] == 'priority' and level[f[i + 1]] then to = level[f[i + 1]] end
    end
    if to ~= KEYS[1] and redis.call('EXISTS', to) == 0 then
      redis.call('XGROUP', 'CREATE', to, '` + Group + `', '0', 'MKSTREAM')
    end
    redis.call('XADD', to, '*', unpack(f))
  else
    local a = string.find(m, '|', 1, true)
    local b = a and string.find(m, '|', a + 1, true)
    local c = b and string.find(m, '|', b + 1, true)
    if c then
      redis.call('XADD', KEYS[1], '*', 'payload', string.sub(m, c + 1),
        'attempts', string.sub(m, a + 1, b - 1), 'orig', string.sub(m, b + 1, c - 1))
    else
      -- no record: an entry without a payload, dead-lettered as malformed
      redis.call('XADD', KEYS[1], '*', 'orig', m)
    end
  end
  redis.call('ZREM', set, m)
  redis.call('HDEL', records, m)
end
local moved, stuck = 0, 0
for k = 4, #KEYS, 2 do
  local due = redis.call('ZRANGEBYSCORE', KEYS[k], '-inf', string.format('%d', now), 'LIMIT', 0, tonumber(ARGV[1]))
  for _, m in ipairs(due) do
    local ok, err = pcall(move, KEYS[k], KEYS[k + 1], m)
    if ok then
      moved = moved + 1
    else
      local msg = type(err) == 'table' and err.err or tostring(err)
      if string.find(msg, 'OOM', 1, true) then return redis.error_reply(msg) end
      redis.pcall('ZADD', KEYS[k], 'XX', string.format('%d', now + 60000), m)
      stuck = stuck + 1
    end
  end
end
return {moved, stuck, redis.call('EXISTS', KEYS[2], KEYS[3]) > 0 and 1 or 0}
`)

// enqueueScript adds a batch of jobs with options, each in turn: refused
// as a duplicate while its unique key names a job; else added to the
// stream of its priority, or, when due later, put in the scheduled set;
// then its unique key is taken. The first job of a level creates that
// level's stream and group. A job whose writes fail (a key of the wrong
// type) is reported and the others go on.
//
// Every job id comes from the normal stream's id space, whatever the job's
// level or due time, so ids never collide and grow in enqueue order. A
// normal job's id is its entry's (XADD *). A job that has no entry there
// (delayed, or of another level) takes the next id after the stream's last
// one, counting up the sequence number of the last id an XADD of this call
// made (the first such job of a call makes one: an entry added and deleted
// at once); a normal job right after it is added under the next id again;
// and when the last id issued is not the stream's last entry, XSETID makes
// it the stream's last id before the call ends, so no later entry can take
// one. A stream whose sequence numbers are too large to count in Lua's
// numbers (only explicit ids of a producer's own make them) gets one XADD
// and XDEL per id instead.
//
// For speed, delayed jobs' records come packed by the client and are
// written together at the end (their keys' types are checked first, so
// those writes cannot fail), unique keys are read with one MGET (a unique
// key that holds another type reads as free, and is overwritten), and
// unique keys without a TTL are taken with one MSET.
//
// KEYS[1] stream, KEYS[2] scheduled, KEYS[3] scheduled jobs, KEYS[4] high
// stream, KEYS[5] low stream, KEYS[6..] unique keys (one per job that has
// one, in job order); ARGV[1] a MessagePack array A of, per job: due (unix
// ms, "0": now); its kind: its priority ("0" normal, "1" high, "2" low),
// then "u" when it has a unique key (the next of KEYS[6..]), or "t" when it
// has one with a TTL, which comes next (ms); n, a number; then n strings:
// its field/value pairs, or for a delayed job (due > 0) one string, its
// record: a MessagePack array of its field/value strings whose length
// counts the "orig" pair the script appends. (One packed argument instead
// of four to eight per job, few items per job, and strings compared rather
// than converted to numbers: each costs.) Returns one
// string per job, in order: its id when added, the queued job's id for a
// duplicate, or the error text when its writes failed; then the number of
// each duplicate job (1 for the call's first) and minus the number of each
// failed one.
var enqueueScript = redis.NewScript(enqueueLua)

// deadScript moves an entry to the dead letters, bounded by dead_max: the
// letter (the entry's fields, the producer's own included, and why it died)
// and its index entry first, then the acknowledgement. The oldest letters
// beyond dead_max are dropped, with their index entries.
//
// Waiters (Wait) get the job's outcome: one EXISTS when nobody waits.
//
// KEYS[1] stream, KEYS[2] dead, KEYS[3] dead index, KEYS[4] stats, KEYS[5]
// the job's unique key (the stream when none), freed last, KEYS[6] waiters;
// ARGV[1] group, ARGV[2] entry id, ARGV[3] consumer, ARGV[4] dead_max,
// ARGV[5] job id, ARGV[6] h, ARGV[7..6+2h] stats field/increment pairs (the
// last run's duration histogram; h 0 for a job that never ran), then
// baton's field/value pairs of the letter.
// Returns -1 when the entry is no longer pending for this consumer, -2
// when another dead letter still there holds the job id (two entries claim
// it; not when the job id is the entry's own): nothing written, 1 when
// letters were dropped to make room, else 0.
const deadLua = entryLua + notifyLua + chainAckLua + chainDeadLua + keyStreamLua + `
if not pending(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return -1 end
local bad = writable(KEYS[2], 'stream', KEYS[3], 'hash')
if bad then return bad end
if ARGV[5] ~= ARGV[2] then
  local held = redis.call('HGET', KEYS[3], ARGV[5])
  if held then
    local e = redis.pcall('XRANGE', KEYS[2], held, held)
    if e.err == nil and #e > 0 then return -2 end
  end
end
local f = fields(KEYS[1], ARGV[2], letter) or {}
put(f, 'orig', ARGV[5])
local l = 7 + 2 * tonumber(ARGV[6])
for i = l, #ARGV, 2 do put(f, ARGV[i], ARGV[i + 1]) end
local over = redis.call('XLEN', KEYS[2]) + 1 - tonumber(ARGV[4])
local id = redis.call('XADD', KEYS[2], '*', unpack(f))
redis.call('HSET', KEYS[3], ARGV[5], id)
trim(KEYS[2], KEYS[3], over)
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
dropKeyIndex(KEYS[1], ARGV[5], ARGV[2])
dropEmptyKeyStream(KEYS[1])
if KEYS[5] ~= KEYS[1] then release(KEYS[5], ARGV[5]) end
redis.pcall('HINCRBY', KEYS[4], 'dead', 1)
for i = l, #ARGV, 2 do
  if ARGV[i] == 'reason' then redis.pcall('HINCRBY', KEYS[4], 'dead:' .. ARGV[i + 1], 1) end
end
for i = 7, l - 1, 2 do redis.pcall('HINCRBY', KEYS[4], ARGV[i], ARGV[i + 1]) end
if redis.call('EXISTS', KEYS[6]) == 1 then
  local reason, why = '', ''
  for i = l, #ARGV, 2 do
    if ARGV[i] == 'reason' then reason = ARGV[i + 1] elseif ARGV[i] == 'error' then why = ARGV[i + 1] end
  end
  notify(KEYS[6], ARGV[5], 'dead\n' .. reason .. '\n' .. why)
end
chainDead(KEYS[4], ARGV[5], tonumber(ARGV[4]))
if over > 0 then return 1 end
return 0
`

var deadScript = redis.NewScript(deadLua)

// requeueScript puts a dead letter back as the same job (same id, attempts
// starting over) in the stream of its priority: the new entry first, then
// the letter and its index entry are removed, and the job's cancel request
// if one is left (its job stopped or dead first), so no holder cancels the
// job again (one that still has a copy of the requests checks first).
//
// KEYS[1] dead, KEYS[2] dead index, KEYS[3] stream, KEYS[4] high stream,
// KEYS[5] low stream, KEYS[6] cancel requests; ARGV[1] dead letter id.
// Returns the job id, 0 when there is no such dead letter, 1 when it has no
// payload (a malformed entry).
var requeueScript = redis.NewScript(entryLua + `
local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #e == 0 then return 0 end
local g, f, job, has, to = e[1][2], {}, ARGV[1], false, KEYS[3]
for i = 1, #g, 2 do
  if g[i] == 'orig' then
    job = g[i + 1]
  elseif not letter[g[i]] then
    put(f, g[i], g[i + 1])
    has = has or g[i] == 'payload'
    if g[i] == 'priority' and g[i + 1] == 'high' then to = KEYS[4] end
    if g[i] == 'priority' and g[i + 1] == 'low' then to = KEYS[5] end
  end
end
if not has then return 1 end
put(f, 'orig', job)
if to ~= KEYS[3] and redis.call('EXISTS', to) == 0 then
  redis.call('XGROUP', 'CREATE', to, '` + Group + `', '0', 'MKSTREAM')
end
redis.call('XADD', to, '*', unpack(f))
if redis.call('HGET', KEYS[2], job) == ARGV[1] then redis.call('HDEL', KEYS[2], job) end
redis.call('XDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[6], job)
return job
`)

// heartbeatScript keeps this consumer's running entries fresh: XCLAIM …
// JUSTID (no delivery counted) of those still pending for it, so that no
// other holder claims them as abandoned, and so that an entry another
// holder claimed after a stall is never taken back from it. One call
// covers several streams (a holder running jobs of many key streams); a
// stream gone meanwhile (a key stream whose last entry was settled) is
// skipped.
//
// KEYS the streams; ARGV[1] group, ARGV[2] consumer, then per stream: n,
// then n entry ids. Returns how many were refreshed.
const heartbeatLua = entryLua + `
local i, total = 3, 0
for _, s in ipairs(KEYS) do
  local n = tonumber(ARGV[i])
  if redis.call('EXISTS', s) == 1 then
    local mine = {}
    for j = i + 1, i + n do
      if pending(s, ARGV[1], ARGV[j], ARGV[2]) then mine[#mine + 1] = ARGV[j] end
    end
    if #mine > 0 then
      redis.call('XCLAIM', s, ARGV[1], ARGV[2], 0, unpack(mine), 'JUSTID')
    end
    total = total + #mine
  end
  i = i + 1 + n
end
return total
`

var heartbeatScript = redis.NewScript(heartbeatLua)

// backScript gives entries that were read but never started back to the
// stream, as new entries with the same fields, runs made and job id: any
// holder may take them at once, and no delivery is counted against them.
// An entry of a key stream goes back to its level's stream (KEYS[2]),
// where the next read parks it in its key's stream; the key stream left
// with no entry is deleted.
//
// KEYS[1] the entries' stream, KEYS[2] the stream they go back to (the
// same, or a key stream's level stream); ARGV[1] group, ARGV[2] consumer,
// then per entry: entry id, runs made, job id. Returns how many were given
// back.
//
// In fleet mode the consumer is the slot (fleet/run-i), which the slot's
// next holder shares: a stale holder's give-back could take back an entry
// the new holder is running, so a holder runs it fenced (work/fence.go).
const backLua = entryLua + keyStreamLua + `
-- a key stream gone (this call made again after a lost reply, which
-- emptied and deleted it): nothing of it is pending
if KEYS[2] ~= KEYS[1] and redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local n = 0
for i = 3, #ARGV, 3 do
  if pending(KEYS[1], ARGV[1], ARGV[i], ARGV[2]) then
    local f = fields(KEYS[1], ARGV[i], baton)
    if f then
      put(f, 'attempts', ARGV[i + 1])
      put(f, 'orig', ARGV[i + 2])
      redis.call('XADD', KEYS[2], '*', unpack(f))
      n = n + 1
    end
    redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
    redis.call('XDEL', KEYS[1], ARGV[i])
  end
end
if KEYS[2] ~= KEYS[1] then dropEmptyKeyStream(KEYS[1]) end
return n
`

// keyStreamLua holds dropEmptyKeyStream(s): s, when it is a key stream
// (KeyStream: <queue's stream>:key:s:<level>:<key>, the queue's name
// ending at its hash tag's '}', a key holding no brace) with no entry
// left, is deleted and taken out of the set of key streams (KeyStreams).
// A stream with no entry has nothing waiting and nothing running: an
// entry is deleted as it is settled. One string search per call for any
// other stream.
//
// trimAcked(s, g, ids), for a key stream, deletes its acknowledged entries
// with one XTRIM MINID instead of XDEL (which costs a key stream's small
// batches about seven times as much): every entry before the oldest one
// still pending, or, with none pending, up to the group's last delivered
// one, was delivered and acknowledged. The ids acknowledged after an
// older entry still pending are deleted one by one. False for any other
// stream.
const keyStreamLua = `
local function keyStreamTag(s)
  local tag = string.find(s, '}', 1, true)
  if not tag or string.sub(s, tag + 1, tag + 7) ~= ':key:s:' then return nil end
  return tag
end
-- dropKeyIndex(s, job, entry): the job's index entry (KeyJobs), when s is
-- a key stream and it still names entry (a settle that never waits for
-- its holder's next take: a lost holder never makes one)
-- stillNamed(index, jobs, entries, out): out, with the jobs added whose
-- index entry still names their entry (a job parked again since names a
-- newer one)
local function stillNamed(index, jobs, entries, out)
  if #jobs == 0 then return out end
  for i, v in ipairs(redis.call('HMGET', index, unpack(jobs))) do
    local e = entries[i] .. '\n'
    if v and string.sub(v, 1, #e) == e then out[#out + 1] = jobs[i] end
  end
  return out
end
local function dropKeyIndex(s, job, entry)
  local tag = keyStreamTag(s)
  if not tag then return end
  local index = string.sub(s, 1, tag) .. ':key:jobs'
  if #stillNamed(index, {job}, {entry}, {}) > 0 then redis.call('HDEL', index, job) end
end
local function dropEmptyKeyStream(s)
  local tag = keyStreamTag(s)
  if not tag then return end
  if redis.call('XLEN', s) == 0 then
    redis.call('DEL', s)
    redis.call('SREM', string.sub(s, 1, tag) .. ':key:streams', s)
  end
end
-- groupOf(groups, g): group g's fields, from an XINFO GROUPS reply; nil
-- when the stream has no such group
local function groupOf(groups, g)
  for _, gr in ipairs(groups) do
    local f = {}
    for i = 1, #gr, 2 do f[gr[i]] = gr[i + 1] end
    if f['name'] == g then return f end
  end
end
-- idAfter: stream id a comes after b
local function idAfter(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if #am ~= #bm then return #am > #bm end
  if am ~= bm then return am > bm end
  return tonumber(as) > tonumber(bs)
end
local function trimAcked(s, g, ids)
  if not keyStreamTag(s) then return false end
  -- gone (emptied and deleted by this same call made before its reply
  -- was lost, or by a sweep): nothing to delete, and no error, which would
  -- leave the call's later batches unacknowledged
  local ok, p = pcall(redis.call, 'XPENDING', s, g, '-', '+', 1)
  if not ok then return true end
  local minid = p[1] and p[1][1]
  if minid then
    -- acknowledged out of order, behind an older running job: those
    -- after it one by one
    local after = {}
    for _, id in ipairs(ids) do
      if idAfter(id, minid) then after[#after + 1] = id end
    end
    if #after > 0 then redis.call('XDEL', s, unpack(after)) end
  else
    local f = groupOf(redis.call('XINFO', 'GROUPS', s), g)
    if f then
      local ms, sq = string.match(f['last-delivered-id'], '^(%d+)-(%d+)$')
      minid = ms .. '-' .. string.format('%d', tonumber(sq) + 1)
    end
  end
  if minid then redis.call('XTRIM', s, 'MINID', minid) end
  return true
end
`

// keySweepScript deletes key streams with no entry (keyStreamLua), as the
// replay's pass over the set of key streams finds them: atomic with an
// enqueue that adds to one meanwhile.
//
// KEYS the key streams. Returns how many were deleted.
var keySweepScript = redis.NewScript(keyStreamLua + `
local n = 0
for _, s in ipairs(KEYS) do
  if redis.call('XLEN', s) == 0 then
    dropEmptyKeyStream(s)
    n = n + 1
  end
end
return n
`)

var backScript = redis.NewScript(backLua)
