package work

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Chains across queues: a job of queue B after a job X of queue A, named
// "A:X" (After, AfterIn). On a Redis Cluster A and B may live on different
// nodes, where no script writes both; the release crosses in three steps,
// each one script on one node, each safe to repeat:
//
//  1. Enqueue registers the dependent in A first (crossAwaitScript: checks
//     X where it was seen, and when X is live adds ">B D nonce" to X's set
//     of dependents, the nonce new for this blocking), then blocks D in B
//     (blockScript: the count includes X, and B's hash
//     baton:{B}:chains:wait holds "D A:X" → nonce).
//  2. X's settle script (ack, dead letter, cancel), finding a member of
//     another queue in X's set, pushes "done|dead X B D nonce" to A's
//     outbox, baton:{A}:chains:outbox, in the same call (chain_settle.go).
//  3. A forwarder (ForwardChains: a holder of A when it starts and within
//     a keeper tick of the settle, a cancel) runs crossForwardScript in B,
//     then removes the item from the outbox. The script acts only when the
//     wait field still holds the nonce, and deletes it: a forwarder killed
//     before the removal is followed by one whose forward finds no field
//     and does nothing. A release that arrives before step 1's write to B
//     (X settled in between) leaves an early marker under the nonce, which
//     that write reads: X counts as done (or dead) there.

// chainWait is queue B's hash of cross-queue dependencies not yet
// released: "<job> <queue>:<id>" → nonce.
func (k Keys) chainWait() string { return k.Stream + ":chains:wait" }

// chainOutbox is the list of releases bound for other queues.
func (k Keys) chainOutbox() string { return k.Stream + ":chains:outbox" }

// AfterIn makes the job wait for jobs of another queue (ids as Enqueue
// returned them there): After("queue:id", ...). The queue may live on
// another Redis Cluster node; the release still happens exactly once.
func AfterIn(queue string, ids ...string) Option {
	full := make([]string, len(ids))
	for i, id := range ids {
		full[i] = queue + ":" + id
	}
	if len(ids) == 0 {
		full = nil
	}
	return After(full...)
}

// splitDep splits a dependency as After takes it: "id", or "queue:id" for
// a job of another queue (queue "" for the job's own).
func splitDep(dep string) (queue, id string, ok bool) {
	if i := strings.LastIndexByte(dep, ':'); i >= 0 {
		queue, id = dep[:i], dep[i+1:]
		if queue == "" || strings.ContainsAny(queue, "{} \t\r\n") {
			return "", "", false
		}
	} else {
		id = dep
	}
	_, ok = parseStreamID(id)
	return queue, id, ok
}

// ownDep is dep with q's own prefix taken off: "q:id" on queue q is "id".
func ownDep(q, dep string) string {
	if dq, id, ok := splitDep(dep); ok && dq == q {
		return id
	}
	return dep
}

// locateAny locates dep ("id" on q, or "queue:id").
func locateAny(ctx context.Context, rdb redis.Cmdable, q, dep string, unknownDone bool) (*Location, error) {
	if dq, id, ok := splitDep(dep); ok && dq != "" {
		loc, err := locateDep(ctx, rdb, dq, id, unknownDone)
		if err != nil {
			return nil, fmt.Errorf("queue %s: %w", dq, err)
		}
		return loc, nil
	}
	return locateDep(ctx, rdb, q, dep, unknownDone)
}

// reserveIDScript issues a job id from a queue's stream, writing no job:
// a dependent of another queue's job needs its id before it is written.
// KEYS[1] the stream; returns the id.
var reserveIDScript = redis.NewScript(`
local id = redis.call('XADD', KEYS[1], '*', 'orig', '')
redis.call('XDEL', KEYS[1], id)
return id
`)

// crossHints registers job (of queue q) with each job of another queue it
// waits for, and returns blockScript's hint for each: "X l <nonce>" (live,
// registered), "X d" (done), "X x" (dead). A job that moved since it was
// located is located again.
func crossHints(ctx context.Context, rdb redis.Cmdable, q, job string, o *jobOptions, deps map[string]*Location, unknownDone bool) (map[string]string, error) {
	var hints map[string]string
	for _, dep := range o.after {
		dq, id, _ := splitDep(dep)
		if dq == "" {
			continue
		}
		if hints == nil {
			hints = map[string]string{}
		}
		var b [8]byte
		_, _ = rand.Read(b[:])
		nonce := hex.EncodeToString(b[:])
		ud := "0"
		if unknownDone {
			ud = "1"
		}
		for try := 0; ; try++ {
			st, err := runScript(ctx, rdb, crossAwaitScript, []string{KeysFor(dq).Stats},
				id, hint(deps[dep]), ud, ">"+q+" "+job+" "+nonce).Text()
			if err != nil {
				return nil, fmt.Errorf("after %s: register with queue %s: %w", dep, dq, err)
			}
			if st != "moved" {
				hints[dep] = "X " + st[:1] + " " + nonce
				if st == "done" {
					hints[dep] = "X d"
				} else if st == "dead" {
					hints[dep] = "X x"
				}
				break
			}
			if try == 10 {
				return nil, fmt.Errorf("after %s: the job kept moving; try again", dep)
			}
			if deps[dep], err = locateAny(ctx, rdb, q, dep, unknownDone); err != nil {
				return nil, err
			}
		}
	}
	return hints, nil
}

// crossAwaitScript registers a dependent of another queue with job X of
// this queue: it checks X where the caller saw it (done and dead first),
// and when X is live adds the dependent to X's set of dependents.
//
// KEYS[1] this queue's stats (the chain keys derive from it); ARGV[1] X,
// ARGV[2] where the caller saw it (blockScript's hints), ARGV[3] "1" to
// take a job that is nowhere as done, ARGV[4] the member (">queue job
// nonce"). Returns "live" (registered), "done", "dead" or "moved" (nothing
// written; locate it again).
var crossAwaitScript = redis.NewScript(chainAckLua + chainStateLua + `
local c = chainKeys(KEYS[1])
local dep, hint = ARGV[1], ARGV[2]
local state = chainState(c, dep, hint, ARGV[3] == '1')
if not state then return 'moved' end
if state == 'live' then
  redis.call('SADD', c.awaited .. ':' .. dep, ARGV[4])
  redis.call('HSET', c.awaited, dep, '1')
end
return state
`)

// crossForwardScript delivers one release from another queue's outbox to
// the dependent's queue: when the wait field of (job, dependency) still
// holds the nonce it takes it out and counts the job down (done) or
// dead-letters it and the jobs after it (dead); else (a forward repeated,
// or arriving before the dependent's blocking was written) it leaves an
// early marker under the nonce and changes nothing else.
//
// KEYS[1] the dependent's queue's stats (the chain keys derive from it);
// ARGV[1] "done" or "dead", ARGV[2] the dependent job, ARGV[3] the
// dependency ("queue:id"), ARGV[4] the nonce, ARGV[5] dead_max. Returns 1
// when it acted, 0 when not.
var crossForwardScript = redis.NewScript(entryLua + notifyLua + chainAckLua + chainDeadLua + `
local c = chainKeys(KEYS[1])
local wait, f = c.base .. ':chains:wait', ARGV[2] .. ' ' .. ARGV[3]
if redis.call('HGET', wait, f) ~= ARGV[4] then
  redis.call('SET', c.base .. ':chains:early:' .. ARGV[4], ARGV[1], 'PX', 604800000)
  return 0
end
local bad = writable(c.dead, 'stream', c.index, 'hash')
if bad then return bad end
redis.call('HDEL', wait, f)
if ARGV[1] == 'done' then
  chainRelease(c, ARGV[2], chainNow())
  return 1
end
local rec = redis.call('HGET', c.blocked, ARGV[2])
if rec then
  local deadMax = tonumber(ARGV[5])
  chainBury(c, ARGV[2], rec, 'dependency_failed', 'dependency ' .. ARGV[3] .. ' is dead', deadMax, chainNow())
  chainFailFrom(c, ARGV[2], deadMax)
end
return 1
`)

// ForwardChains delivers the releases queue q's settle scripts put in its
// outbox for dependents in other queues, and then those that the deliveries
// put in the other queues' outboxes (a failure cascading down a chain),
// each once whatever repeats: a holder calls it when it starts and after a
// settle that filled the outbox. It returns how many it delivered.
func ForwardChains(ctx context.Context, rdb redis.Cmdable, q string) (int, error) {
	n, seen, todo := 0, map[string]bool{}, []string{q}
	for len(todo) > 0 && len(seen) < 64 {
		a := todo[0]
		todo = todo[1:]
		if seen[a] {
			continue
		}
		seen[a] = true
		out := KeysFor(a).chainOutbox()
		items, err := rdb.LRange(ctx, out, 0, 999).Result()
		if err != nil {
			return n, fmt.Errorf("forward chains: read queue %s's outbox: %w", a, err)
		}
		for _, it := range items {
			p := strings.Split(it, " ")
			if len(p) == 5 && (p[0] == "done" || p[0] == "dead") {
				if _, err := runScript(ctx, rdb, crossForwardScript, []string{KeysFor(p[2]).Stats},
					p[0], p[3], a+":"+p[1], p[4], 10000).Result(); err != nil {
					return n, fmt.Errorf("forward chains: release job %s of queue %s (after %s:%s): %w", p[3], p[2], a, p[1], err)
				}
				n++
				todo = append(todo, p[2])
			}
			if err := rdb.LRem(ctx, out, 1, it).Err(); err != nil {
				return n, fmt.Errorf("forward chains: clear queue %s's outbox: %w", a, err)
			}
		}
	}
	return n, nil
}

// forwardChains is ForwardChains for the holder's queue; a failure is
// logged, and the keeper's next tick or the next holder tries again.
func (r *runner) forwardChains() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := ForwardChains(ctx, r.c.Client, r.c.Queue)
	if err != nil {
		r.c.Logger.Warn().Err(err).Msg("could not release a job chained after this queue's in its queue; trying again")
	} else if n > 0 {
		r.c.Logger.Debug().Int("jobs", n).Msg("released chained jobs of other queues")
	}
}

// blockCross is blockJob's first step for a job that waits for jobs of
// other queues: it issues the job's id when it has none yet (*job == "")
// and registers it with each of them (crossHints). nil when it waits for
// none.
func blockCross(ctx context.Context, rdb redis.Cmdable, q string, job *string, o *jobOptions, deps map[string]*Location, requeue bool) (map[string]string, error) {
	any := false
	for _, dep := range o.after {
		if dq, _, _ := splitDep(dep); dq != "" {
			any = true
		}
	}
	if !any {
		return nil, nil
	}
	if *job == "" {
		id, err := runScript(ctx, rdb, reserveIDScript, []string{KeysFor(q).Stream}).Text()
		if err != nil {
			return nil, fmt.Errorf("issue a job id: %w", err)
		}
		*job = id
	}
	return crossHints(ctx, rdb, q, *job, o, deps, requeue)
}

// IsDependency reports whether s names a job as After takes it: a job id,
// or QUEUE:ID for a job of another queue.
func IsDependency(s string) bool {
	_, _, ok := splitDep(s)
	return ok
}
