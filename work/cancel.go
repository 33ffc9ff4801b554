package work

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// What Cancel did with one job id.
const (
	CancelDone      = "cancelled" // taken out (waiting, scheduled, retrying) and dead-lettered as "cancelled"
	CancelRequested = "requested" // running: the request is written, its holder stops it within about a second
	CancelNothing   = "nothing"   // nothing to cancel: the job is done, dead or unknown (State says which)
)

// cancelKeep is how long a running job's cancel request waits in
// Keys.Cancel for a holder to act on it (the key expires this long after
// the last request): long enough for the slot's next holder, or one that
// claims the job after visibility_timeout, to see it.
const cancelKeep = time.Hour

// CancelResult is what became of one id given to Cancel.
type CancelResult struct {
	ID      string `json:"id"`
	State   string `json:"state"`                 // where the job was: waiting, blocked, scheduled, retrying, running, done, dead, unknown
	Outcome string `json:"outcome"`               // CancelDone, CancelRequested or CancelNothing
	Letter  string `json:"dead_letter,omitempty"` // the dead letter's id (CancelDone)
	Slot    string `json:"slot,omitempty"`        // the slot running it (CancelRequested)
}

// CancelOptions are Cancel's options; the zero value is the defaults.
type CancelOptions struct {
	// Reason is kept as the dead letter's error: why it was cancelled.
	Reason string
	// DeadMax bounds the dead letters, as the queue's dead_max. Default 10000.
	DeadMax int
}

// Cancel cancels jobs of queue q by id (the id enqueue returned): a job
// waiting, scheduled or retrying is taken out and dead-lettered with
// reason "cancelled" at once, its unique key freed, so `baton dead
// requeue` can bring it back; for a running job a request is written,
// and the holder running it, on whichever host, stops it within about a
// second (an exec job's process group gets SIGTERM, then SIGKILL after
// shutdown_grace; a persistent child is killed and replaced; a Go
// handler's context is cancelled with cause ErrCancelled) and
// dead-letters it as cancelled. A job that is done, dead, unknown, or of
// another queue, is left alone (CancelNothing). Each id is one script
// call, which decides against the job's state at that instant.
func Cancel(ctx context.Context, rdb redis.Cmdable, q string, ids ...string) ([]CancelResult, error) {
	return CancelWith(ctx, rdb, q, CancelOptions{}, ids...)
}

// CancelWith is Cancel with options.
func CancelWith(ctx context.Context, rdb redis.Cmdable, q string, o CancelOptions, ids ...string) ([]CancelResult, error) {
	if o.DeadMax < 1 {
		o.DeadMax = 10000
	}
	if o.Reason == "" {
		o.Reason = "cancelled"
	}
	out := make([]CancelResult, 0, len(ids))
	for _, id := range ids {
		res, err := cancelOne(ctx, rdb, q, o, id)
		if err != nil {
			return out, fmt.Errorf("cancel job %s: %w", id, err)
		}
		out = append(out, res)
	}
	return out, nil
}

// cancelOne locates the job, then runs cancelScript against what it saw;
// the script checks it again, and when the job moved meanwhile (it was
// read, retried, finished) the job is located again.
func cancelOne(ctx context.Context, rdb redis.Cmdable, q string, o CancelOptions, id string) (CancelResult, error) {
	k := KeysFor(q)
	res := CancelResult{ID: id}
	for try := 0; try < 10; try++ {
		loc, err := Locate(ctx, rdb, q, id)
		if err != nil {
			return res, err
		}
		res.State = loc.State
		if loc.Key != "" { // in its key's stream, waiting or running (key_cancel.go)
			if gone, err := cancelKeyed(ctx, rdb, q, k, o, loc, &res); err != nil || !gone {
				return res, err
			}
			continue
		}
		stream, entry, unique, batch := k.Stream, "", "", ""
		switch loc.State {
		case StateWaiting, StateRunning:
			level, _ := ParsePriority(loc.Priority)
			stream, entry = k.StreamOf(level), loc.Entry
			if m, err := rdb.XRange(ctx, stream, entry, entry).Result(); err == nil && len(m) == 1 {
				v := m[0].Values
				unique, _ = v[uniqueField].(string)
				batch, _ = v[batchField].(string)
			}
		case StateRetrying:
			unique, _ = runScript(ctx, rdb, recordFieldScript, []string{k.RetryJobs}, id, uniqueField).Text()
			batch = recordBatch(ctx, rdb, k.RetryJobs, id)
		case StateScheduled:
			unique, _ = runScript(ctx, rdb, recordFieldScript, []string{k.ScheduledJobs}, id, uniqueField).Text()
			batch = recordBatch(ctx, rdb, k.ScheduledJobs, id)
		case StateBlocked:
			letter, err := cancelBlocked(ctx, rdb, k, o, id)
			if err != nil {
				return res, err
			}
			if letter == "" {
				continue // released or dead-lettered meanwhile: look again
			}
			res.Outcome, res.Letter = CancelDone, letter
			return res, nil
		default: // done, dead, unknown
			res.Outcome = CancelNothing
			return res, nil
		}
		ukey := stream // none
		if unique != "" {
			ukey = k.Unique(unique)
		}
		script, keys := cancelScript, []string{stream, k.Dead, k.DeadIndex, k.Stats, ukey, k.Cancel, k.Retry, k.RetryJobs, k.Scheduled, k.ScheduledJobs, k.Waiters}
		args := []any{Group, id, entry, o.DeadMax, o.Reason, cancelKeep.Milliseconds(), time.Now().UnixMilli(), k.Unique("")}
		if batch != "" { // a batch member: counted dead in the same step (batch_settle.go)
			script, keys, args = batchCancelScript, append(keys, k.batchKeys(batch)...), append(args, q, batch)
		}
		v, err := runScript(ctx, rdb, script, keys, args...).StringSlice()
		if err != nil {
			return res, err
		}
		if batch != "" {
			_, _ = ForwardBatches(ctx, rdb, q) // a callback bound for another queue; else the next holder's
		}
		if len(v) == 0 {
			return res, errors.New("cancel script replied nothing")
		}
		switch v[0] {
		case "gone": // it moved since Locate saw it: look again
			continue
		case StateRunning:
			res.State, res.Outcome, res.Slot = StateRunning, CancelRequested, v[1]
		default:
			res.State, res.Outcome, res.Letter = v[0], CancelDone, v[1]
		}
		return res, nil
	}
	return res, fmt.Errorf("job %s kept moving; try again", id)
}

// cancelScript cancels one job in the state the caller saw: a retrying or
// scheduled job's record, or a waiting entry (not pending), becomes a dead
// letter with reason "cancelled" (the letter and its index entry first,
// the removal last, the unique key freed if it names the job); for a
// running (pending) entry the job id and why are written to the cancel
// requests for its holder, which expire cancelKeep after the last.
//
// KEYS[1] the job's stream, KEYS[2] dead, KEYS[3] dead index, KEYS[4]
// stats, KEYS[5] the job's unique key (KEYS[1] when none), KEYS[6] cancel
// requests, KEYS[7] retry, KEYS[8] retry jobs, KEYS[9] scheduled, KEYS[10]
// scheduled jobs, KEYS[11] waiters (Wait: told of a dead letter written
// here); ARGV[1] group, ARGV[2] job id, ARGV[3] its entry id (""
// when not in the stream), ARGV[4] dead_max, ARGV[5] why, ARGV[6] how long
// cancel requests are kept (ms), ARGV[7] now (unix ms, the letter's
// failed_at), ARGV[8] the prefix of the queue's unique keys (Keys.Unique:
// the normal stream's, whatever the job's level).
// Returns {state, letter id} when dead-lettered (state: retrying,
// scheduled, waiting); {"running", consumer} when requested; {"gone"} when
// the job is not where the caller saw it, or its unique key is not
// KEYS[5] (the caller looks again).
const cancelLua = entryLua + notifyLua + chainAckLua + chainDeadLua + buryLua + `
local job, entry = ARGV[2], ARGV[3]
local function ukey(f) return uniqueOf(f, ARGV[8]) end
-- bury letters the job (buryLua) with fields f, runs made and last entry.
local function bury(f, runs, last)
  return buryCancelled({dead = KEYS[2], index = KEYS[3], stats = KEYS[4], waiters = KEYS[11],
    why = ARGV[5], now = ARGV[7], max = ARGV[4]}, job, f, runs, last)
end
-- from a retry or scheduled set
for _, s in ipairs({{KEYS[7], KEYS[8], 'retrying'}, {KEYS[9], KEYS[10], 'scheduled'}}) do
  local packed = redis.call('HGET', s[2], job)
  if packed and redis.call('ZSCORE', s[1], job) then
    local all, f, runs = cmsgpack.unpack(packed), {}, '0'
    for i = 1, #all, 2 do
      if all[i] == 'attempts' then runs = all[i + 1]
      elseif not letter[all[i]] then put(f, all[i], all[i + 1]) end
    end
    local u = ukey(f)
    if (u or KEYS[1]) ~= KEYS[5] then return {'gone'} end
    local id = bury(f, runs, job)
    redis.call('ZREM', s[1], job)
    redis.call('HDEL', s[2], job)
    if u then release(u, job) end
    chainDead(KEYS[4], job, tonumber(ARGV[4]))
    return {s[3], id}
  end
end
if entry == '' then return {'gone'} end
local f, runs, reply = cancelAt(KEYS[1], ARGV[1], job, entry, KEYS[6], ARGV[5], ARGV[6])
if reply then return reply end
local u = ukey(f)
if (u or KEYS[1]) ~= KEYS[5] then return {'gone'} end
local id = bury(f, runs, entry)
redis.call('XDEL', KEYS[1], entry)
if u then release(u, job) end
chainDead(KEYS[4], job, tonumber(ARGV[4]))
return {'waiting', id}
`

var cancelScript = redis.NewScript(cancelLua)

// buryLua is what the cancel scripts (cancelScript, keyCancelScript) share.
// cancelAt(stream, group, job, entry, requests, why, keep) looks at job's
// entry in stream: not there or not the job's, it returns reply {"gone"};
// pending (running), it writes the cancel request (requests, kept keep
// ms) and returns reply {"running", consumer}; else (waiting) the entry's
// fields, baton's own taken out, and the runs made. uniqueOf(f, prefix) is
// the unique key named in fields f, nil when none.
// buryCancelled(to, job, f, runs, last) writes a cancelled job's dead
// letter:
// letters job with fields f (baton's own taken out), runs made and last
// entry id, bounded by to.max (dead_max), in to.dead and to.index, counts
// it in to.stats and tells to.waiters (why: to.why, failed_at: to.now);
// returns the letter's id. It raises an error, before anything is
// written, when dead or index holds another type.
const buryLua = `
local function cancelAt(stream, group, job, entry, requests, why, keep)
  local e = redis.call('XRANGE', stream, entry, entry)
  if #e == 0 then return nil, nil, {'gone'} end
  local all, f, runs, orig = e[1][2], {}, '0', entry
  for i = 1, #all, 2 do
    if all[i] == 'attempts' then runs = all[i + 1]
    elseif all[i] == 'orig' then if all[i + 1] ~= '' then orig = all[i + 1] end
    elseif not letter[all[i]] then put(f, all[i], all[i + 1]) end
  end
  if orig ~= job then return nil, nil, {'gone'} end
  local p = redis.pcall('XPENDING', stream, group, entry, entry, 1)
  if p.err == nil and #p > 0 then
    redis.call('HSET', requests, job, why)
    redis.call('PEXPIRE', requests, keep)
    return nil, nil, {'running', p[1][2]}
  end
  return f, runs
end
local function uniqueOf(f, prefix)
  for i = 1, #f, 2 do
    if f[i] == 'unique' then return prefix .. f[i + 1] end
  end
  return nil
end
local function buryCancelled(to, job, f, runs, last)
  local bad = writable(to.dead, 'stream', to.index, 'hash')
  if bad then error(bad) end
  put(f, 'orig', job)
  put(f, 'reason', 'cancelled')
  put(f, 'attempts', runs)
  put(f, 'error', to.why)
  put(f, 'id', last)
  put(f, 'failed_at', to.now)
  local over = redis.call('XLEN', to.dead) + 1 - tonumber(to.max)
  -- Another job's letter still there may hold this job id (two entries
  -- claim it): the index is never written over, this letter is kept all
  -- the same (listed, requeued by its letter id).
  local held = redis.call('HGET', to.index, job)
  if held then
    local e = redis.pcall('XRANGE', to.dead, held, held)
    if e.err ~= nil or #e == 0 then held = nil end
  end
  local id = redis.call('XADD', to.dead, '*', unpack(f))
  if not held then redis.call('HSET', to.index, job, id) end
  trim(to.dead, to.index, over)
  redis.pcall('HINCRBY', to.stats, 'dead', 1)
  redis.pcall('HINCRBY', to.stats, 'dead:cancelled', 1)
  if redis.call('EXISTS', to.waiters) == 1 then notify(to.waiters, job, 'dead\ncancelled\n' .. to.why) end
  return id
end
`

// AwaitCancel waits until a job whose cancel was requested (it was
// running) is no longer running, polling every 50 ms until ctx ends, and
// returns its state then, seen twice in a row (Locate's reads are not one
// step: a settle script that runs between them can show a state for an
// instant): dead with reason "cancelled" is the cancel done; done or
// unknown (with retention 0) is the job having finished first. It then
// takes the job's request out of the cancel requests, so a job brought
// back by `baton dead requeue` runs. On ctx's end it returns the job's
// last state with ctx's error.
func AwaitCancel(ctx context.Context, rdb redis.Cmdable, q, id string) (*Location, error) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	var last *Location
	for {
		loc, err := Locate(ctx, rdb, q, id)
		if err == nil && loc.State != StateRunning {
			if last != nil && last.State == loc.State {
				if err := rdb.HDel(ctx, KeysFor(q).Cancel, id).Err(); err != nil {
					return loc, fmt.Errorf("clear cancel request of job %s: %w", id, err)
				}
				return loc, nil
			}
			last = loc
			continue // look again at once
		}
		last = loc
		select {
		case <-ctx.Done():
			return loc, ctx.Err()
		case <-t.C:
		}
	}
}

// CancelAndWait cancels one job (CancelWith) and, when it was running,
// waits for its holder to stop it (AwaitCancel) until ctx ends. A job
// that went back to waiting meanwhile (its holder gave it back unstarted)
// is cancelled again. Outcome is CancelDone when the job ended cancelled,
// CancelNothing when it finished first (State: done, or unknown with
// retention 0), CancelRequested with ctx's error when it still ran at
// ctx's end.
func CancelAndWait(ctx context.Context, rdb redis.Cmdable, q string, o CancelOptions, id string) (CancelResult, error) {
	for round := 0; ; round++ {
		res, err := CancelWith(ctx, rdb, q, o, id)
		if err != nil || res[0].Outcome != CancelRequested {
			if len(res) == 0 {
				return CancelResult{ID: id}, err
			}
			return res[0], err
		}
		r := res[0]
		loc, err := AwaitCancel(ctx, rdb, q, id)
		if err != nil {
			return r, err
		}
		switch {
		case loc.State == StateDead && loc.Dead != nil && loc.Dead.Reason == ReasonCancelled:
			r.Outcome, r.Letter = CancelDone, loc.Dead.ID
			return r, nil
		case loc.State == StateDone || loc.State == StateUnknown || loc.State == StateDead || round >= 3:
			r.Outcome, r.State = CancelNothing, loc.State
			return r, nil
		}
	}
}

// cancelSeen marks the jobs of this holder named in the cancel requests
// (job id → why; read in the keeper's round trip, only when there are
// some) and cancels the context of those running: the workers dead-letter
// them as cancelled.
func (r *runner) cancelSeen(req map[string]string) {
	r.mu.Lock()
	if len(req) == 0 {
		r.cancels = nil
		r.mu.Unlock()
		return
	}
	r.cancels = req
	for _, j := range r.active {
		why, ok := req[j.ID]
		if !ok || j.verdict != "" || j.cancelled.Load() {
			continue
		}
		j.cancelWhy = why
		j.cancelled.Store(true)
		r.c.Logger.Info().Str("job", j.ID).Str("entry", j.Entry).Str("why", why).Msg("cancelling job")
	}
	workers := r.workers
	r.mu.Unlock()
	for _, w := range workers {
		w.mu.Lock()
		if w.job != nil && w.job.cancelled.Load() {
			w.cancel(ErrCancelled)
		}
		w.mu.Unlock()
	}
}

// cancelReplayed marks a job being dispatched that the latest cancel
// requests name (a replayed or claimed entry; a cancel of a job not
// delivered takes it out of the stream itself). Called with r.mu held.
func (r *runner) cancelReplayed(j *Job) {
	why, ok := r.cancels[j.ID]
	if !ok || j.verdict != "" || j.cancelled.Load() {
		return
	}
	j.cancelWhy = why
	j.cancelled.Store(true)
	r.c.Logger.Info().Str("job", j.ID).Str("entry", j.Entry).Str("why", why).Msg("cancelling job")
}

// cancelWithdrawn reports whether a job marked cancelled before it
// started has no cancel request any more, and then unmarks it: the mark
// may come from a copy of the requests up to keepEvery old, which still
// names a job requeued since (RequeueDead takes its request out). One
// HEXISTS, only for a job about to be dead-lettered as cancelled unrun;
// when Redis does not answer, the mark stands.
func (r *runner) cancelWithdrawn(ctx context.Context, j *Job) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if on, err := r.c.Client.HExists(ctx, r.keys.Cancel, j.ID).Result(); err != nil || on {
		return false
	}
	r.mu.Lock()
	j.cancelled.Store(false)
	j.cancelWhy = ""
	r.mu.Unlock()
	r.c.Logger.Info().Str("job", j.ID).Str("entry", j.Entry).Msg("cancel request gone: running the job")
	return true
}

// cancelled dead-letters a cancelled job (stopped, or never started), then
// takes its request out of the cancel requests, only once the letter is
// written: a job left pending (Redis down, a fenced write) is cancelled by
// the holder that replays it.
func (r *runner) cancelled(j *Job, ran time.Duration) {
	why := j.cancelWhy
	if why == "" {
		why = "cancelled"
	}
	if ran > 0 {
		why += fmt.Sprintf(" (stopped after %s)", ran.Round(time.Millisecond))
	}
	id := j.ID // deadLetter may letter it under its entry id
	if !r.deadLetter(j, ReasonCancelled, why, nil) {
		return // still pending: the request stays for the slot's next holder
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.c.Client.HDel(ctx, r.keys.Cancel, id).Err(); err != nil {
		r.c.Logger.Debug().Err(err).Str("job", id).Msg("clear the cancel request")
	}
}
