package work

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Chains: a job enqueued with After waits, blocked, until every job it
// names is done, then enters its stream like any job (its priority, delay,
// unique key and other options intact). When one of them is dead-lettered
// (any reason, a cancel too), the blocked job is dead-lettered as
// dependency_failed, and so are the jobs blocked on it. Both happen in the
// script that settles the dependency (chain_settle.go). Within a queue
// every key a chain touches is under the queue's hash tag, so on a Redis
// Cluster one node holds it and each step is one script; a job of another
// queue ("queue:id") is released through an outbox (chain_cross.go).

// ReasonDependencyFailed is the dead-letter reason of a blocked job one of
// whose dependencies was dead-lettered.
const ReasonDependencyFailed = "dependency_failed"

// StateBlocked is a job waiting for its dependencies (Locate).
const StateBlocked = "blocked"

// afterField carries a chained job's dependencies (comma-separated job
// ids) in its record, entry and dead letter: `dead requeue` blocks it on
// them again. Reserved.
const afterField = "after"

// Errors of chained enqueues.
var (
	// ErrNoDependency is a job named by After that is not on the queue:
	// never enqueued there, or done and forgotten (retention 0).
	ErrNoDependency = errors.New("no such job to wait for")
	// ErrDependencyDead is returned, wrapped in a *DependencyError, when a
	// job named by After was already dead: the new job was dead-lettered
	// at once as dependency_failed.
	ErrDependencyDead = errors.New("a job it waits for is dead")
)

// DependencyError lists the jobs of EnqueueMany dead-lettered at once
// because a job they wait for was dead, by index, with that job's id. It
// wraps ErrDependencyDead; their ids are returned as for any job.
type DependencyError struct {
	Jobs []int
	Deps []string
}

func (e *DependencyError) Error() string {
	return fmt.Sprintf("job %d: dead-lettered at once as %s: %v (job %s); requeue it, then this one",
		e.Jobs[0]+1, ReasonDependencyFailed, ErrDependencyDead, e.Deps[0])
}

// Unwrap makes errors.Is(err, ErrDependencyDead) true.
func (e *DependencyError) Unwrap() error { return ErrDependencyDead }

// Blocked is the hash of blocked jobs: job id → its record, as a scheduled
// job's (a MessagePack array of its field/value strings, orig included).
func (k Keys) Blocked() string { return k.Stream + ":blocked" }

// BlockedLeft is the hash of blocked jobs' counts: job id → "<dependencies
// not yet done> <due, unix ms; 0: now>".
func (k Keys) BlockedLeft() string { return k.Stream + ":blocked:left" }

// Awaited is the hash of jobs that blocked jobs wait for: job id → "1"; the
// ids of the jobs blocked on each are in the set AwaitedBy(job id). It
// exists only while a chain does: the settle scripts look at it only then.
func (k Keys) Awaited() string { return k.Stream + ":awaited" }

// AwaitedBy is the set of the jobs blocked on job id.
func (k Keys) AwaitedBy(id string) string { return k.Awaited() + ":" + id }

// After makes the job wait until every job named (ids of the same queue,
// as Enqueue returned them, or "queue:id" for a job of another queue: see
// AfterIn) is done: it is blocked (Locate, status), then
// enters its stream with its other options. When one of them is
// dead-lettered, so is the job, as dependency_failed. A job named must be
// on the queue (waiting, running, scheduled, retrying, blocked or dead) or
// done within the queue's retention, else Enqueue adds nothing and returns
// ErrNoDependency; one already dead dead-letters the job at once
// (DependencyError). A delay (In, At) counts from the enqueue: a job
// released after its due time runs at once.
func After(ids ...string) Option {
	return func(o *jobOptions) error {
		if len(ids) == 0 {
			return fmt.Errorf("%w: after: no job id", ErrBadOption)
		}
		for _, id := range ids {
			if _, _, ok := splitDep(id); !ok {
				return fmt.Errorf("%w: after %q: not a job id (they look like 1700000000000-0, or queue:1700000000000-0 for another queue's)", ErrBadOption, id)
			}
			if !slices.Contains(o.after, id) {
				o.after = append(o.after, id)
			}
		}
		return nil
	}
}

// locateDeps locates every job that a job of the call waits for, before
// anything is sent: one not on the queue adds nothing. It marks the
// chained jobs sent, so that sendJobs leaves them to enqueueChained; nil
// when no job has After.
func locateDeps(ctx context.Context, rdb redis.Cmdable, q string, opts []jobOptions, sent []bool) (map[string]*Location, error) {
	var deps map[string]*Location
	for i := range opts {
		if len(opts[i].after) == 0 {
			continue
		}
		sent[i] = true
		for k, dep := range opts[i].after {
			opts[i].after[k] = ownDep(q, dep)
		}
		if deps == nil {
			deps = map[string]*Location{}
		}
		for _, dep := range opts[i].after {
			if deps[dep] != nil {
				continue
			}
			loc, err := locateAny(ctx, rdb, q, dep, false)
			if err != nil {
				return nil, fmt.Errorf("job %d: %w", i+1, err)
			}
			deps[dep] = loc
		}
	}
	return deps, nil
}

// locateDep is Locate of a job waited for; unknown is ErrNoDependency,
// unless unknownDone (a requeue: a job named before that is now nowhere
// was done).
func locateDep(ctx context.Context, rdb redis.Cmdable, q, dep string, unknownDone bool) (*Location, error) {
	loc, err := Locate(ctx, rdb, q, dep)
	if err != nil {
		return nil, fmt.Errorf("after %s: %w", dep, err)
	}
	if loc.State == StateUnknown && !unknownDone {
		return nil, fmt.Errorf("after %s: %w on queue %s: never enqueued there, or done and not kept (a job can only wait for a job enqueued before it, and for one already done only within the queue's retention)",
			dep, ErrNoDependency, q)
	}
	return loc, nil
}

// enqueueChained adds the chained jobs of EnqueueMany (those locateDeps
// marked) one script call each, after the others, each followed by w's
// WAIT on its connection when replicas are asked for, and folds their
// duplicates, dependency failures and replication into prev, the error of
// the others.
func enqueueChained(ctx context.Context, rdb redis.Cmdable, q string, jobs []Message, opts []jobOptions, deps map[string]*Location, ids []string, w *waitCall, prev error) error {
	if deps == nil {
		return prev
	}
	var dup []int
	var de *DuplicateError
	if errors.As(prev, &de) {
		dup, prev = de.Jobs, nil
	}
	var failed DependencyError
	for i := range jobs {
		if len(opts[i].after) == 0 {
			continue
		}
		id, dead, err := blockJob(ctx, rdb, q, jobs[i].Payload, &opts[i], deps, nil, nil, w)
		ids[i] = id
		switch {
		case errors.Is(err, ErrDuplicate):
			dup = append(dup, i)
		case err != nil:
			return errors.Join(prev, fmt.Errorf("job %d: %w", i+1, err))
		case dead != "":
			failed.Jobs, failed.Deps = append(failed.Jobs, i), append(failed.Deps, dead)
		}
	}
	if prev != nil {
		return prev
	}
	if err := w.err(); err != nil {
		return err
	}
	if len(failed.Jobs) > 0 {
		return errors.Join(&failed, dupErr(dup))
	}
	return dupErr(dup)
}

// hint says where Locate saw a job waited for, for blockScript to check.
func hint(loc *Location) string {
	switch loc.State {
	case StateWaiting, StateRunning:
		if loc.Key != "" {
			return "k" // in its key's stream (chainState finds its entry by the key index)
		}
		level, _ := ParsePriority(loc.Priority)
		return strconv.Itoa(int(level)) + " " + loc.Entry
	case StateRetrying:
		return "r"
	case StateScheduled:
		return "c"
	case StateBlocked:
		return "b"
	case StateDone:
		return "d"
	case StateDead:
		return "x"
	}
	return "u"
}

// requeued is a dead chained job blockJob puts back: its letter and job id.
type requeued struct{ letter, job string }

// blockJob runs blockScript until it settles: a job waited for that moved
// since it was located is located again. It returns the job's id, and the
// id of a job waited for that was dead (the job was dead-lettered at
// once). With re, it requeues that dead letter (same id), taking a job
// waited for that is nowhere as done, and refusing while one is dead.
func blockJob(ctx context.Context, rdb redis.Cmdable, q string, payload []byte, o *jobOptions, deps map[string]*Location, rec []byte, re *requeued, w *waitCall) (id, dead string, err error) {
	k := KeysFor(q)
	if rec == nil {
		rec = chainRecord(payload, o)
	}
	due := int64(0)
	if o.due.After(time.Now()) {
		due = o.due.UnixMilli()
	}
	ukey, ttl := k.Stream, int64(0) // none
	if o.unique != "" {
		ukey, ttl = k.Unique(o.unique), o.uniqueFor.Milliseconds()
	}
	job, letter, unknownDone := "", "", "0"
	if re != nil {
		job, letter, unknownDone = re.job, re.letter, "1"
	}
	keys := []string{k.Stream, k.High, k.Low, k.Scheduled, k.ScheduledJobs, k.Retry, k.Blocked(), k.BlockedLeft(),
		k.Awaited(), k.Done, k.Dead, k.DeadIndex, k.Stats, ukey}
	cross, err := blockCross(ctx, rdb, q, &job, o, deps, re != nil)
	if err != nil {
		return "", "", err
	}
	for try := 0; try < 10; try++ {
		args := []any{job, rec, due, letter, unknownDone, 10000, ttl}
		for _, dep := range o.after {
			if h, ok := cross[dep]; ok {
				args = append(args, dep, h)
			} else {
				args = append(args, dep, hint(deps[dep]))
			}
		}
		v, err := blockCall(ctx, rdb, keys, args, w)
		if err != nil {
			return "", "", err
		}
		if len(v) < 2 {
			return "", "", fmt.Errorf("block script replied %q", v)
		}
		switch v[0] {
		case "moved":
			if deps[v[1]], err = locateAny(ctx, rdb, q, v[1], re != nil); err != nil {
				return "", "", err
			}
			continue
		case "cycle":
			return "", "", fmt.Errorf("%w: after %s: a job cannot wait for itself", ErrBadOption, v[1])
		case "dup":
			return v[1], "", ErrDuplicate
		case "deaddep":
			return "", "", fmt.Errorf("job %s still waits for job %s, which is dead: requeue it first: %w", job, v[1], ErrDependencyDead)
		case "noletter":
			return "", "", fmt.Errorf("%s: %w", letter, ErrNoDeadLetter)
		case "dead":
			return v[1], v[2], nil
		}
		return v[1], "", nil
	}
	return "", "", fmt.Errorf("the jobs it waits for kept moving; try again")
}

// blockCall runs blockScript once; with replicas asked for (w), followed
// by WAIT in the same pipeline, on the same connection, which WAIT needs.
func blockCall(ctx context.Context, rdb redis.Cmdable, keys []string, args []any, w *waitCall) ([]string, error) {
	if w == nil || w.replicas == 0 {
		return runScript(ctx, rdb, blockScript, keys, args...).StringSlice()
	}
	for try := 0; ; try++ {
		var c *redis.Cmd
		wait := redis.NewIntCmd(ctx, "wait", w.replicas, w.timeout.Milliseconds())
		_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			c = blockScript.EvalSha(ctx, p, keys, args...)
			_ = p.Process(ctx, wait)
			return nil
		})
		if isNoScript(c.Err()) && try == 0 {
			if err := blockScript.Load(ctx, rdb).Err(); err != nil {
				return nil, scriptingErr("SCRIPT LOAD", err)
			}
			continue
		}
		w.cmds = append(w.cmds, wait)
		return c.StringSlice()
	}
}

// chainRecord packs a chained job's record: its fields, its dependencies
// (afterField), and room for the orig pair blockScript appends.
func chainRecord(payload []byte, o *jobOptions) []byte {
	n := o.fields() + 2
	b := appendArrayHeader(nil, n+2)
	b = appendFields(b, payload, o)
	return appendPackedString(appendPackedString(b, afterField), strings.Join(o.after, ","))
}

// blockScript adds one chained job, or puts a dead one back: it checks
// each job waited for where the caller saw it (done and dead are checked
// first, wherever it was seen), takes the job's unique key, and writes the
// job's record and count to the blocked hashes and its id to the awaited
// sets of those not yet done (a set that names it already, from a former
// blocking, keeps it once: counted once). With none left the job goes to its stream (or the
// scheduled set, when due later) at once, by the same release the settle
// scripts run. A job waited for that is dead dead-letters the new job as
// dependency_failed at once; on a requeue it refuses, writing nothing.
//
// KEYS[1] stream, KEYS[2] high stream, KEYS[3] low stream, KEYS[4]
// scheduled, KEYS[5] scheduled jobs, KEYS[6] retry, KEYS[7] blocked,
// KEYS[8] blocked left, KEYS[9] awaited, KEYS[10] done, KEYS[11] dead,
// KEYS[12] dead index, KEYS[13] stats, KEYS[14] the unique key (KEYS[1]
// when none); ARGV[1] job id ("": a new one, issued from the stream's ids),
// ARGV[2] its record (packed, orig to append), ARGV[3] due (unix ms, 0:
// now), ARGV[4] the dead letter to requeue ("" on enqueue), ARGV[5] "1" to
// take a job waited for that is nowhere (hint "u") as done, ARGV[6]
// dead_max, ARGV[7] the unique key's TTL (ms, 0: none), then pairs: a job
// waited for and where the caller saw it (hint: "<level> <entry>", "r"
// retrying, "c" scheduled, "b" blocked, "d" done, "x" dead, "u" nowhere;
// for a job of another queue, registered there already: "X l <nonce>"
// live, "X d" done, "X x" dead).
// Returns {state, job id} with state blocked, waiting or scheduled;
// {"dead", job id, dead job waited for, letter}; {"moved", job} when a job
// waited for is not where the caller saw it (nothing written; locate it
// again); {"cycle", id}; {"dup", queued job's id}; {"deaddep", job};
// {"noletter", ""}.
var blockScript = redis.NewScript(entryLua + notifyLua + chainAckLua + chainDeadLua + chainStateLua + `
local c = chainKeys(KEYS[13])
local job, now, deadMax = ARGV[1], chainNow(), tonumber(ARGV[6])
local live, dead, cross = {}, nil, {}
for i = 8, #ARGV, 2 do
  local dep, hint = ARGV[i], ARGV[i + 1]
  if dep == job then return {'cycle', dep} end
  if string.sub(hint, 1, 2) == 'X ' then
    -- another queue's job, registered there already (chain_cross.go):
    -- l live (unless its release came first: the early marker), d, x
    local st, nonce = string.sub(hint, 3, 3), string.sub(hint, 5)
    local early = st == 'l' and redis.call('GET', c.base .. ':chains:early:' .. nonce)
    if st == 'x' or early == 'dead' then
      dead = dead or dep
    elseif st == 'l' and early ~= 'done' then
      cross[#cross + 1] = {dep, nonce}
    end
  else
    local state = chainState(c, dep, hint, ARGV[5] == '1')
    if not state then return {'moved', dep} end
    if state == 'dead' then
      dead = dead or dep
    elseif state == 'live' then
      live[#live + 1] = dep
    end
  end
end
if ARGV[4] ~= '' then
  if dead then return {'deaddep', dead} end
  if #redis.call('XRANGE', KEYS[11], ARGV[4], ARGV[4]) == 0 then return {'noletter', ''} end
end
local ukey = KEYS[14]
if ukey ~= KEYS[1] then
  local held = redis.call('GET', ukey)
  if held and held ~= job then return {'dup', held} end
end
local bad = writable(KEYS[7], 'hash', KEYS[8], 'hash', KEYS[9], 'hash', KEYS[11], 'stream', KEYS[12], 'hash')
if bad then return bad end
if job == '' then
  job = redis.call('XADD', KEYS[1], '*', 'orig', '')
  redis.call('XDEL', KEYS[1], job)
end
local rec = ARGV[2] .. '\164orig' .. string.char(160 + #job) .. job
if #job >= 32 then rec = ARGV[2] .. '\164orig' .. string.char(217, #job) .. job end
if dead then
  local id = chainBury(c, job, rec, 'dependency_failed', 'dependency ' .. dead .. ' is dead', deadMax, now)
  return {'dead', job, dead, id}
end
if ARGV[4] ~= '' then
  if redis.call('HGET', KEYS[12], job) == ARGV[4] then redis.call('HDEL', KEYS[12], job) end
  redis.call('XDEL', KEYS[11], ARGV[4])
end
redis.call('HSET', KEYS[7], job, rec)
redis.call('HSET', KEYS[8], job, string.format('%d', #live + #cross + 1) .. ' ' .. ARGV[3])
for _, x in ipairs(cross) do redis.call('HSET', c.base .. ':chains:wait', job .. ' ' .. x[1], x[2]) end
for _, dep in ipairs(live) do
  redis.call('SADD', KEYS[9] .. ':' .. dep, job)
  redis.call('HSET', KEYS[9], dep, '1')
end
if ukey ~= KEYS[1] then
  if tonumber(ARGV[7]) > 0 then
    redis.call('SET', ukey, job, 'PX', ARGV[7])
  else
    redis.call('SET', ukey, job)
  end
end
-- the one count added above: released here, so a job with nothing left
-- to wait for moves on at once
chainRelease(c, job, now)
if #live + #cross > 0 then return {'blocked', job} end
if tonumber(ARGV[3]) > now then return {'scheduled', job} end
return {'waiting', job}
`)

// requeueChained puts back a dead chained job (its letter has an after
// field): blocked again on the jobs it waits for that are not done (one
// that is nowhere any more counts as done), or waiting when none is left.
// While one is dead it refuses: requeue that one first.
func requeueChained(ctx context.Context, rdb redis.Cmdable, q string, d *DeadLetter) (string, error) {
	o := &jobOptions{}
	for dep := range strings.SplitSeq(d.Fields[afterField], ",") {
		if _, _, ok := splitDep(dep); ok && !slices.Contains(o.after, dep) {
			o.after = append(o.after, dep)
		}
	}
	deps := map[string]*Location{}
	for _, dep := range o.after {
		loc, err := locateAny(ctx, rdb, q, dep, true)
		if err != nil {
			return "", err
		}
		deps[dep] = loc
	}
	// The record: the letter's fields, as requeueScript puts them back.
	names := make([]string, 0, len(d.Fields))
	for f := range d.Fields {
		if f != afterField {
			names = append(names, f)
		}
	}
	slices.Sort(names)
	rec := appendArrayHeader(nil, 2+2*len(names)+2+2)
	rec = appendPackedString(appendPackedString(rec, PayloadField), d.Payload)
	for _, f := range names {
		rec = appendPackedString(appendPackedString(rec, f), d.Fields[f])
	}
	rec = appendPackedString(appendPackedString(rec, afterField), strings.Join(o.after, ","))
	id, _, err := blockJob(ctx, rdb, q, nil, o, deps, rec, &requeued{letter: d.ID, job: d.JobID}, nil)
	return id, err
}

// blockedAt fills in a blocked job's location from its count ("<left>
// <due>"): the jobs it still waits for (those whose awaited set names
// it) and its due time, if delayed.
func blockedAt(ctx context.Context, rdb redis.Cmdable, k Keys, loc *Location, left string) error {
	loc.State = StateBlocked
	if _, due, ok := strings.Cut(left, " "); ok {
		if ms, _ := strconv.ParseInt(due, 10, 64); ms > 0 {
			loc.Due = time.UnixMilli(ms)
		}
	}
	after, err := runScript(ctx, rdb, recordFieldScript, []string{k.Blocked()}, loc.ID, afterField).Text()
	if err != nil {
		if isRedisNil(err) {
			return nil
		}
		return err
	}
	deps := strings.Split(after, ",")
	member := make([]*redis.BoolCmd, len(deps))
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, dep := range deps {
			if dq, _, _ := splitDep(dep); dq != "" {
				member[i] = p.HExists(ctx, k.chainWait(), loc.ID+" "+dep)
			} else {
				member[i] = p.SIsMember(ctx, k.AwaitedBy(dep), loc.ID)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	for i, m := range member {
		if m.Val() {
			loc.WaitingFor = append(loc.WaitingFor, deps[i])
		}
	}
	return nil
}

// cancelBlocked dead-letters a blocked job as cancelled, and the jobs
// blocked on it as dependency_failed; "" when it is no longer blocked.
func cancelBlocked(ctx context.Context, rdb redis.Cmdable, k Keys, o CancelOptions, id string) (string, error) {
	v, err := runScript(ctx, rdb, cancelBlockedScript, []string{k.Stats}, id, o.DeadMax, o.Reason).StringSlice()
	if err != nil || len(v) < 2 {
		return "", err
	}
	return v[1], nil
}

// cancelBlockedScript dead-letters a blocked job as cancelled (its record
// becomes the letter, its unique key is freed) and the jobs blocked on it
// as dependency_failed.
//
// KEYS[1] stats (the chain keys are derived from it, under the same hash
// tag); ARGV[1] job id, ARGV[2] dead_max, ARGV[3] why.
// Returns {"blocked", letter id}, or {"gone"} when the job is not blocked.
var cancelBlockedScript = redis.NewScript(entryLua + notifyLua + chainAckLua + chainDeadLua + `
local c = chainKeys(KEYS[1])
local rec = redis.call('HGET', c.blocked, ARGV[1])
if not rec then return {'gone'} end
local bad = writable(c.dead, 'stream', c.index, 'hash')
if bad then return bad end
local id = chainBury(c, ARGV[1], rec, 'cancelled', ARGV[3], tonumber(ARGV[2]), chainNow())
chainFailFrom(c, ARGV[1], tonumber(ARGV[2]))
return {'blocked', id}
`)

// IsJobID reports whether id has the form of a job id (1700000000000-0).
func IsJobID(id string) bool {
	_, ok := parseStreamID(id)
	return ok
}
