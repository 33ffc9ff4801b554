package work

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// DeadError is Wait's error for a job that was dead-lettered: its reason
// (failed, timeout, crashed, rejected, cancelled, ...) and last error. It
// matches ErrCancelled when the job was cancelled.
type DeadError struct {
	ID     string
	Reason string
	Err    string
}

func (e *DeadError) Error() string {
	return fmt.Sprintf("job %s dead-lettered (%s): %s", e.ID, e.Reason, e.Err)
}

// Is makes a cancelled job's DeadError match ErrCancelled.
func (e *DeadError) Is(target error) bool {
	return target == ErrCancelled && e.Reason == ReasonCancelled
}

// waitBlock is how long one BLPOP of Wait blocks; Wait itself returns at
// ctx's end, whatever its BLPOP does.
const waitBlock = 5 * time.Second

// waitersKeep is how long a waiter's registration lasts without a refresh:
// a waiter that died is forgotten after it.
const waitersKeep = time.Hour

// notifyLua hands a settled job's outcome to its waiters (Wait). A settle
// script checks once per call that the waiters hash exists (EXISTS, no
// more when nobody waits); for each job with waiters it pushes one copy
// of the outcome per waiter on the job's own list (the waiters key, ":",
// the job id: under the queue's hash tag, so on the script's shard),
// which expires a minute later, and forgets the waiters. The outcome is
// "done\n" and the result, or "dead\n", the reason, "\n" and the error.
const notifyLua = `
local function notify(waiters, job, outcome)
  local n = tonumber(redis.call('HGET', waiters, job) or '0')
  if n <= 0 then return end
  redis.call('HDEL', waiters, job)
  local l = waiters .. ':' .. job
  for i = 1, n do redis.call('RPUSH', l, outcome) end
  redis.call('PEXPIRE', l, 60000)
end
-- jobOf is the job id of a stream entry: its orig field, or its own id.
local function jobOf(stream, id)
  local e = redis.call('XRANGE', stream, id, id)
  if #e == 0 then return nil end
  local f = e[1][2]
  for i = 1, #f, 2 do
    if f[i] == 'orig' and f[i + 1] ~= '' then return f[i + 1] end
  end
  return id
end
`

// waitScript looks whether a job is settled and, when it is not, counts
// one more waiter for it, in one step (lua/wait.lua).
var waitScript = redis.NewScript(waitLua)

// unwaitScript counts one waiter less for a job (a Wait that ended
// without an outcome; lua/unwait.lua).
var unwaitScript = redis.NewScript(unwaitLua)

// Wait blocks until job id of queue q is done or dead, and returns its
// result (nil when it set none; Result's bytes) or, for a dead job, a
// *DeadError with its reason and error (errors.Is(err, ErrCancelled) for
// a cancelled one). A job already settled returns at once, from its done
// record (kept for the retention) or its dead letter; a job not known
// (never enqueued, or done and not kept) returns ErrUnknownJob; ctx's end
// returns ctx's error.
//
// It does not poll: it registers as a waiter and blocks (BLPOP) on the
// job's own list, which the script that settles the job pushes its
// outcome to, in the same step, only when someone waits (one EXISTS per
// settle call otherwise). Any number of callers may wait for one job; each
// holds one connection of rdb's pool while it blocks. With retention 0 a
// waiter registered before the job finished still gets its result.
func Wait(ctx context.Context, rdb redis.Cmdable, q, id string) ([]byte, error) {
	k := KeysFor(q)
	keys := []string{k.Done, k.Results, k.DeadIndex, k.Dead, k.Waiters}
	v, err := runScript(ctx, rdb, waitScript, keys, id, waitersKeep.Milliseconds(), "1").StringSlice()
	if err != nil {
		return nil, fmt.Errorf("wait for job %s: %w", id, err)
	}
	if v[0] != "wait" {
		return settledOutcome(id, v)
	}
	list := k.Waiters + ":" + id
	unwait := func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = runScript(c, rdb, unwaitScript, []string{k.Waiters}, id).Err()
	}
	// A job that is nowhere (never enqueued, or done with retention 0)
	// is unknown, unless it was settled since we registered: then its
	// outcome waits on the list.
	loc, err := Locate(ctx, rdb, q, id)
	if err != nil {
		unwait()
		return nil, fmt.Errorf("wait for job %s: %w", id, err)
	}
	if loc.State == StateUnknown {
		m, err := rdb.LPop(ctx, list).Bytes()
		if err == nil {
			return outcome(id, m)
		}
		unwait()
		if !isRedisNil(err) {
			return nil, fmt.Errorf("wait for job %s: %w", id, err)
		}
		return nil, fmt.Errorf("wait for job %s: %w on queue %s (done and not kept: see retention; or never enqueued here)", id, ErrUnknownJob, q)
	}
	type reply struct {
		m   []byte
		err error
	}
	got := make(chan reply, 1)
	quit := make(chan struct{})
	go func() {
		// BLPOP does not end with ctx (go-redis): it blocks waitBlock at
		// a time, and the waiter leaves after the one running at ctx's end.
		refreshed := time.Now()
		for {
			m, err := rdb.BLPop(context.WithoutCancel(ctx), waitBlock, list).Result()
			if err == nil {
				got <- reply{m: []byte(m[1])}
				return
			}
			select {
			case <-quit:
				unwait()
				return
			default:
			}
			if !isRedisNil(err) {
				unwait()
				got <- reply{err: err}
				return
			}
			if time.Since(refreshed) > waitersKeep/4 { // a long wait: keep the registration
				_ = runScript(ctx, rdb, waitScript, keys, id, waitersKeep.Milliseconds(), "0").Err()
				refreshed = time.Now()
			}
		}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			return nil, fmt.Errorf("wait for job %s: %w", id, r.err)
		}
		return outcome(id, r.m)
	case <-ctx.Done():
		close(quit)
		return nil, ctx.Err()
	}
}

// settledOutcome is waitScript's reply for a settled job as Wait's.
func settledOutcome(id string, v []string) ([]byte, error) {
	switch {
	case v[0] == "done" && len(v) == 2:
		if v[1] == "" {
			return nil, nil
		}
		return []byte(v[1]), nil
	case v[0] == "dead" && len(v) == 3:
		return nil, &DeadError{ID: id, Reason: v[1], Err: v[2]}
	}
	return nil, fmt.Errorf("wait for job %s: script replied %q", id, v)
}

// outcome is a notify message (notifyLua) as Wait's result.
func outcome(id string, m []byte) ([]byte, error) {
	kind, rest, ok := bytes.Cut(m, []byte("\n"))
	switch {
	case ok && string(kind) == "done":
		if len(rest) == 0 {
			return nil, nil
		}
		return rest, nil
	case ok && string(kind) == "dead":
		reason, why, _ := bytes.Cut(rest, []byte("\n"))
		return nil, &DeadError{ID: id, Reason: string(reason), Err: string(why)}
	}
	return nil, fmt.Errorf("wait for job %s: %w: outcome %q", id, errors.ErrUnsupported, m)
}
