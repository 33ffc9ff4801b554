package work

import (
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// batchField is the reserved stream-entry field that makes a job a member
// of a batch (its value: the batch id); a callback job carries the batch id
// in batchCallbackField and the summary (JSON) in batchSummaryField.
const (
	batchField         = "batch"
	batchCallbackField = "batch_callback"
	batchSummaryField  = "batch_summary"
)

// ReasonBatchFailed is the dead-letter reason of an on-success-only
// batch's callback when a member died: never run, requeue-able.
const ReasonBatchFailed = "batch_failed"

// batchKeep is how long a complete batch's record (its counts, summary and
// the signal Wait blocks on) is kept, in seconds: 7 days.
const batchKeep = 7 * 24 * 3600

// maxBatchDeadIDs bounds the dead members' ids a batch keeps for its
// summary; the dead count is always exact.
const maxBatchDeadIDs = 1000

// batchLua holds the Lua helpers of the batch scripts. A batch's keys, all
// in its queue's hash slot: B the batch (hash), S its dead members (hash
// job id → "x" dead, "d" once a requeued one is done; dropped when
// complete), D the first dead
// members' ids (list), G the signal Wait blocks on (list); O the queue's
// outbox of complete batches whose callback goes to another queue (set).
//
// bdead counts one member's death once per job id, whatever replays the
// settle: a job id already in S is not counted again (a member requeued and
// dead again). A complete batch or one gone counts nothing more. A done
// member is counted by batchAckLua alone: once per entry, by the XACK that
// acknowledged it.
//
// bcomplete completes a closed batch whose members are all settled, once:
// it builds the summary, enqueues the callback in the batch's own queue (or
// dead-letters it as batch_failed; or puts the batch in the outbox for a
// callback in another queue), and pushes the signal.
var batchLua = `
local function bdead(B, S, D, job)
  local c = redis.call('HMGET', B, 'created', 'completed')
  if not c[1] or c[2] then return end
  if redis.call('HSETNX', S, job, 'x') == 0 then return end
  redis.call('HINCRBY', B, 'dead', 1)
  if redis.call('LLEN', D) < ` + strconv.Itoa(maxBatchDeadIDs) + ` then redis.call('RPUSH', D, job) end
end
local function bcomplete(B, S, D, G, O, stream, dead, index, id, queue)
  local h = redis.call('HMGET', B, 'closed', 'total', 'done', 'dead', 'completed', 'name', 'callback', 'cbqueue', 'success_only', 'has_callback')
  if h[1] ~= '1' or h[5] then return 0 end
  local total, done, nd = tonumber(h[2] or '0'), tonumber(h[3] or '0'), tonumber(h[4] or '0')
  if done + nd < total then return 0 end
  local t = redis.call('TIME')
  local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  local ids = {}
  for _, j in ipairs(redis.call('LRANGE', D, 0, 999)) do ids[#ids + 1] = cjson.encode(j) end
  local summary = '{"id":' .. cjson.encode(id) .. ',"name":' .. cjson.encode(h[6] or '') ..
    ',"queue":' .. cjson.encode(queue) .. ',"total":' .. string.format('%d', total) ..
    ',"done":' .. string.format('%d', done) .. ',"dead":' .. string.format('%d', nd) ..
    ',"dead_ids":[' .. table.concat(ids, ',') .. '],"completed_at":' .. now .. '}'
  local state, cid = 'none', ''
  if h[10] == '1' then
    local failed = h[9] == '1' and nd > 0
    if h[8] and h[8] ~= '' and h[8] ~= queue then
      redis.call('SADD', O, id)
      state = 'outbox'
    elseif failed then
      cid = redis.call('XADD', dead, '*', 'payload', h[7], 'batch_callback', id, 'batch_summary', summary,
        'reason', 'batch_failed', 'error', string.format('%d of %d jobs of batch %s died', nd, total, id),
        'attempts', '0', 'failed_at', now)
      redis.call('HSET', index, cid, cid)
      state = 'dead'
    else
      cid = redis.call('XADD', stream, '*', 'payload', h[7], 'batch_callback', id, 'batch_summary', summary)
      state = 'enqueued'
    end
  end
  redis.call('HSET', B, 'completed', now, 'summary', summary, 'callback_id', cid, 'callback_state', state)
  redis.call('DEL', S)
  redis.call('RPUSH', G, '1')
  for _, k in ipairs({B, D, G}) do redis.call('EXPIRE', k, ` + strconv.Itoa(batchKeep) + `) end
  if state == 'outbox' then return 2 end
  return 1
end
`

// batchAckLua acknowledges finished batch members and counts each in its
// batch, in one step: a member is counted only when this call acknowledged
// its entry (once per entry, ever), so a replayed call (a lost reply), a
// second run's ack or a fenced holder's write counts nothing. One XACK for
// all; only when it acknowledged fewer than all does the script look for
// which (those still in the stream). A
// job has one live entry at a time, and only a requeue from the dead
// letters makes a done after a count: that member moves from dead to done.
// Then each batch it touched completes if it can.
//
// KEYS[1] the members' stream, KEYS[2] stats, KEYS[3] done set, KEYS[4]
// outbox, KEYS[5] dead, KEYS[6] dead index, KEYS[7] the queue's normal
// stream (callbacks go there), then B, S, D, G per batch;
// ARGV[1] group, ARGV[2] queue, ARGV[3] retention (ms; 0: record nothing),
// ARGV[4] retention_max, ARGV[5] h, ARGV[6..5+2h] stats field/increment
// pairs, then nb, nb batch ids, then per member: entry id, job id ("" when
// the entry's own), batch number (1..nb).
// Returns {acknowledged, batches put in the outbox}.
var batchAckLua = batchLua + notifyLua + chainAckLua + keyStreamLua + `
local h = tonumber(ARGV[5])
local p = 6 + 2 * h
local nb = tonumber(ARGV[p])
local first = p + nb + 1
local entries, jobs = {}, {}
for i = first, #ARGV, 3 do
  entries[#entries + 1] = ARGV[i]
  jobs[#jobs + 1] = ARGV[i + 1] ~= '' and ARGV[i + 1] or ARGV[i]
end
-- As ackLua: wake work.Wait's waiters (members keep no result) and release
-- the jobs chained after a member, in this same step.
local waiters = string.sub(KEYS[2], 1, #KEYS[2] - 6) .. ':waiters'
if redis.call('EXISTS', waiters) == 1 then
  for _, e in ipairs(entries) do
    local job = jobOf(KEYS[1], e)
    if job then notify(waiters, job, 'done\n') end
  end
end
local chained = chainSettling(KEYS[1], KEYS[2], entries)
local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(entries))
-- fresh[k]: entry k was pending and this call acknowledged it. Usually all
-- were (nil: all). Else, those still in the stream were: every script that
-- acknowledges an entry deletes it in the same step.
local fresh = nil
if acked < #entries then
  fresh = {}
  for k, e in ipairs(entries) do fresh[k] = #redis.call('XRANGE', KEYS[1], e, e) > 0 end
end
-- live[n]: batch n's done count to add, or false when it is complete or
-- gone; dead[n]: it has dead members (its settled hash exists). Both read
-- once per call: it completes only at the end of this script.
local live, dead = {}, {}
for k = 1, #entries do
  if not fresh or fresh[k] then
    local n = tonumber(ARGV[first + 3 * (k - 1) + 2])
    local b = 8 + 4 * (n - 1)
    if live[n] == nil then
      local c = redis.call('HMGET', KEYS[b], 'created', 'completed')
      live[n] = (c[1] and not c[2]) and 0 or false
      dead[n] = live[n] and redis.call('EXISTS', KEYS[b + 1]) == 1
    end
    if live[n] then
      if dead[n] and redis.call('HGET', KEYS[b + 1], jobs[k]) == 'x' then
        -- a dead member requeued, done now: from dead to done
        redis.call('HSET', KEYS[b + 1], jobs[k], 'd')
        redis.call('HINCRBY', KEYS[b], 'dead', -1)
        redis.call('LREM', KEYS[b + 2], 1, jobs[k])
      end
      live[n] = live[n] + 1
    end
  end
end
redis.call('XDEL', KEYS[1], unpack(entries))
-- members of a key stream: their index entries and the emptied stream go
-- now, not with the holder's next take (a lost holder makes none)
if keyStreamTag(KEYS[1]) then
  for k, e in ipairs(entries) do dropKeyIndex(KEYS[1], jobs[k], e) end
  dropEmptyKeyStream(KEYS[1])
end
if acked > 0 then
  redis.pcall('HINCRBY', KEYS[2], 'done', acked)
  for i = 6, 5 + 2 * h, 2 do redis.pcall('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1]) end
end
local out = 0
for n, add in pairs(live) do
  if add then
    local b = 8 + 4 * (n - 1)
    if add > 0 then redis.call('HINCRBY', KEYS[b], 'done', add) end
    if bcomplete(KEYS[b], KEYS[b + 1], KEYS[b + 2], KEYS[b + 3], KEYS[4], KEYS[7], KEYS[5], KEYS[6], ARGV[p + n], ARGV[2]) == 2 then
      out = out + 1
    end
  end
end
local keep = tonumber(ARGV[3])
if keep > 0 and #jobs > 0 then
  local t = redis.call('TIME')
  local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  local z = {}
  for _, j in ipairs(jobs) do z[#z + 1] = now; z[#z + 1] = j end
  redis.pcall('ZADD', KEYS[3], unpack(z))
  redis.pcall('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. string.format('%d', tonumber(now) - keep))
  redis.pcall('ZREMRANGEBYRANK', KEYS[3], 0, -1 - tonumber(ARGV[4]))
  redis.pcall('PEXPIRE', KEYS[3], keep)
end
if chained then chainDone(chained) end
return {acked, out}
`

var batchAckScript = redis.NewScript(batchAckLua)

// batchForm is a settle script for a batch member: body (a script after
// entryLua) runs as it is, and once it reports the member settled (the Lua
// condition settled, over its reply res) the member, whose job id is the
// Lua expression job, is counted dead and its batch completes if it can,
// in the same step. The batch's keys and id come last in KEYS and ARGV and
// are taken off first, so that the body reads its own as it expects.
//
// KEYS: body's, then B, S, D, G, O, the queue's normal stream
// (Keys.batchKeys); ARGV: body's, then the queue, then the batch id.
// Returns body's reply.
func batchForm(body, settled, job string) string {
	return entryLua + batchLua + `
local bk = {}
for i = 6, 1, -1 do bk[i] = table.remove(KEYS) end
local bid = table.remove(ARGV)
local bqueue = table.remove(ARGV)
local function settle_body()
` + strings.TrimPrefix(body, entryLua) + `
end
local res = settle_body()
if ` + settled + ` then
  bdead(bk[1], bk[2], bk[3], ` + job + `)
  bcomplete(bk[1], bk[2], bk[3], bk[4], bk[5], bk[6], KEYS[2], KEYS[3], bid, bqueue)
end
return res
`
}

// batchDeadLua is deadScript for a batch member: counted dead once the
// letter is written (not when the entry was no longer pending: another
// holder settled it).
var batchDeadLua = batchForm(deadLua, "type(res) == 'number' and res >= 0", "ARGV[5]")

var batchDeadScript = redis.NewScript(batchDeadLua)

// batchCancelLua is cancelScript for a batch member: a member it
// dead-letters (waiting, retrying or scheduled) is counted dead in the same
// step; a running one is left to its holder, whose dead letter counts it.
var batchCancelLua = batchForm(cancelLua, "res[1] == 'waiting' or res[1] == 'retrying' or res[1] == 'scheduled'", "ARGV[2]")

var batchCancelScript = redis.NewScript(batchCancelLua)

func init() {
	fenced[batchAckScript] = redis.NewScript(fenceLua + batchAckLua)
	fenced[batchDeadScript] = redis.NewScript(fenceLua + batchDeadLua)
}

// batchOpenScript opens a batch: refused when its id is taken.
//
// KEYS[1] B, KEYS[2] the queue's batch list (sorted set, by creation);
// ARGV[1] id, then field/value pairs of the batch.
// Returns 1, or 0 when the id is taken.
var batchOpenScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('HSET', KEYS[1], 'created', now, 'closed', '0', 'total', '0', 'done', '0', 'dead', '0', unpack(ARGV, 2))
redis.call('ZADD', KEYS[2], now, ARGV[1])
return 1
`)

// batchAddScript adds members to an open batch (each a new entry carrying
// the batch id, in the stream of its level) and counts them in its total,
// in one step; with close, it then closes the batch, which completes it at
// once when every member is already settled (an empty batch).
//
// KEYS[1] B, KEYS[2] S, KEYS[3] D, KEYS[4] G, KEYS[5] outbox, KEYS[6]
// stream, KEYS[7] high, KEYS[8] low, KEYS[9] dead, KEYS[10] dead index;
// ARGV[1] batch id, ARGV[2] queue, ARGV[3] "1" to close, then per job:
// level ("0", "1", "2"), n, then n field/value strings.
// Returns {ids...} of the members, in order; an error "NOBATCH" or
// "BATCHCLOSED" (members for a closed batch; a close alone is a no-op)
// before anything is written.
var batchAddScript = redis.NewScript(batchLua + `
local c = redis.call('HMGET', KEYS[1], 'created', 'closed')
if not c[1] then return redis.error_reply('NOBATCH no batch ' .. ARGV[1] .. ' in queue ' .. ARGV[2]) end
if c[2] == '1' then
  if #ARGV == 3 and ARGV[3] == '1' then return {} end -- closed again: nothing to do
  return redis.error_reply('BATCHCLOSED batch ' .. ARGV[1] .. ' is closed')
end
local level = {['0'] = KEYS[6], ['1'] = KEYS[7], ['2'] = KEYS[8]}
local ids, i = {}, 4
while i <= #ARGV do
  local to, n = level[ARGV[i]], tonumber(ARGV[i + 1])
  if to ~= KEYS[6] and redis.call('EXISTS', to) == 0 then
    redis.call('XGROUP', 'CREATE', to, '` + Group + `', '0', 'MKSTREAM')
  end
  local f = {}
  for k = i + 2, i + 1 + n do f[#f + 1] = ARGV[k] end
  f[#f + 1] = 'batch'; f[#f + 1] = ARGV[1]
  ids[#ids + 1] = redis.call('XADD', to, '*', unpack(f))
  i = i + 2 + n
end
redis.call('HINCRBY', KEYS[1], 'total', #ids)
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 'closed', '1')
  bcomplete(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[9], KEYS[10], ARGV[1], ARGV[2])
end
return ids
`)

// batchForwardScript enqueues a batch's callback in its own queue, once:
// a marker in that queue, set with the callback's id, makes a second
// forward of the same batch (a holder killed after this and before the
// outbox was cleared, two holders at once) return the first one's id.
//
// KEYS[1] marker, KEYS[2] stream, KEYS[3] dead, KEYS[4] dead index;
// ARGV[1] "1" to dead-letter it (batch_failed), ARGV[2] payload, ARGV[3]
// batch id, ARGV[4] summary, ARGV[5] error, ARGV[6] the marker's TTL (s).
// Returns the callback's job id.
var batchForwardScript = redis.NewScript(`
local had = redis.call('GET', KEYS[1])
if had then return had end
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local cid
if ARGV[1] == '1' then
  cid = redis.call('XADD', KEYS[3], '*', 'payload', ARGV[2], 'batch_callback', ARGV[3], 'batch_summary', ARGV[4],
    'reason', 'batch_failed', 'error', ARGV[5], 'attempts', '0', 'failed_at', now)
  redis.call('HSET', KEYS[4], cid, cid)
else
  cid = redis.call('XADD', KEYS[2], '*', 'payload', ARGV[2], 'batch_callback', ARGV[3], 'batch_summary', ARGV[4])
end
redis.call('SET', KEYS[1], cid, 'EX', ARGV[6])
return cid
`)

// batchForwardedScript records a forwarded callback in its batch and takes
// the batch out of the outbox.
//
// KEYS[1] B, KEYS[2] outbox; ARGV[1] batch id, ARGV[2] callback id,
// ARGV[3] its state. Returns 1, or 0 when it was no longer in the outbox.
var batchForwardedScript = redis.NewScript(`
if redis.call('SREM', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'callback_id', ARGV[2], 'callback_state', ARGV[3])
return 1
`)
