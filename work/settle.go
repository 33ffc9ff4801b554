package work

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/redis/go-redis/v9"
)

// ackLinger is how long the settler waits for more successes before it
// acknowledges a part batch of fast jobs (mean under 1 ms).
const ackLinger = time.Millisecond

// lingerAlone: jobs at least this slow on average (and under 1 ms) make
// the settler linger; fewer than ackLinger/lingerAlone (50) finish during a
// linger, well under the results channel's room, so it sleeps through it
// instead of waking at each result.
const lingerAlone = 20 * time.Microsecond

// maxErrorLen bounds the error text kept with a dead letter.
const maxErrorLen = 2048

// settle records every outcome in Redis: successes are acknowledged in
// batches (whatever is waiting goes in one script call), failures are
// scheduled for retry or dead-lettered. A transient Redis error (the
// connection) is retried until RedisDownExit; a permanent one (a key of the
// wrong type, OOM, a refused script) is not. Either way the entry stays
// pending until a move succeeds, so it can run again but never vanish: the
// slot's next holder replays it, or another holder claims it after
// visibility_timeout.
func (r *runner) settle() {
	const most = 256
	var acks [3]ackBatch     // by level
	var members [3]batchAcks // batch members, by level: acked apart (batch_settle.go)
	var back [3][]any        // by level
	var ks *keyedSettle      // the same for entries in key streams, by stream; nil until one comes
	n := 0                   // entries in acks
	flush := func() {
		for level := range acks {
			r.ack(entryKey{level: Priority(level)}, &acks[level])
			r.ackBatchMembers(entryKey{level: Priority(level)}, &members[level])
		}
		if ks != nil {
			ks.flush(r)
		}
		n = 0
	}
	giveBack := func() {
		for level := range back {
			r.giveBack(entryKey{level: Priority(level)}, back[level])
			back[level] = back[level][:0]
		}
		if ks != nil {
			ks.giveBack(r)
		}
	}
	one := func(res result) {
		defer r.survive(res.job)
		if r.tracer != nil {
			r.traceSettled(res)
		}
		j := res.job
		if j.inKey && ks == nil {
			ks = new(keyedSettle)
		}
		switch {
		case res.back && j.inKey:
			ks.back(j)
		case res.back:
			back[j.Priority] = append(back[j.Priority], j.Entry, j.Attempt-1, j.ID)
		case res.dead == ReasonCancelled:
			r.cancelled(j, res.dur)
		case res.dead != "":
			r.deadLetter(j, res.dead, j.problem, nil) // never ran: no duration
		case res.err == nil && j.inBatch() != "":
			if j.inKey {
				ks.members(j).add(j, res.dur)
			} else {
				members[j.Priority].add(j, res.dur)
			}
			n++
		case res.err == nil:
			b := &acks[j.Priority]
			if j.inKey {
				b = ks.acks(j)
			}
			b.ids = append(b.ids, j.Entry)
			if r.c.Retention > 0 {
				b.jobs = append(b.jobs, j.ID)
			}
			b.hist.add(res.dur)
			if p := j.result.Load(); p != nil {
				b.results = append(b.results, j.ID, *p)
			}
			if j.unique != "" {
				b.uniqueKeys = append(b.uniqueKeys, r.keys.Unique(j.unique))
				b.uniqueIDs = append(b.uniqueIDs, j.ID)
			}
			n++
		default:
			r.fail(j, res.err, res.dur)
		}
	}
	// take adds whatever results wait, without blocking, up to a batch.
	take := func() {
		for n < most {
			select {
			case res, ok := <-r.results:
				if !ok {
					return
				}
				one(res)
			default:
				return
			}
		}
	}
	r.forwardBatches() // what a holder killed half way left in the outbox
	r.forwardChains()  // the same for chains across queues
	for res := range r.results {
		one(res)
		take()
		if mean := time.Duration(r.meanNS.Load()); n > 0 && n < most && mean >= lingerAlone && mean < time.Millisecond {
			// Jobs finish one by one, fast but not instantly (a persistent
			// child's): sleep a moment, not woken by each result, then take
			// what came, so they share an ack. Faster jobs (an in-process
			// no-op) fill batches by themselves; a linger only slows them.
			time.Sleep(ackLinger)
			take()
		}
		flush()
		giveBack()
	}
	flush()
	giveBack()
}

// ackBatch is the finished jobs of one level waiting to be acknowledged.
type ackBatch struct {
	ids        []any
	uniqueKeys []string // keys of acked jobs that hold one; their job ids in uniqueIDs
	uniqueIDs  []any
	jobs       []any     // the job ids of the entries in ids, with a retention only
	results    []any     // pairs of job id and result, of the jobs that set one
	hist       histogram // durations of the jobs in ids
}

// ack acknowledges a batch of the stream at (an entryKey without id) in
// one script call and empties it.
func (r *runner) ack(at entryKey, b *ackBatch) {
	if len(b.ids) == 0 {
		return
	}
	// Even after a panic (logged), the batch is emptied.
	defer func() {
		r.survived(recover(), len(b.ids))
		r.acked(at, b)
	}()
	keys, args := r.ackArgs(at, b)
	r.writeAck(ackScript, keys, args, len(b.ids))
}

// acked forgets the entries of b, a batch of the stream at, and empties
// it, whether or not their acknowledgement was written: what was not
// stays pending in Redis for the slot's next holder.
func (r *runner) acked(at entryKey, b *ackBatch) {
	for _, id := range b.ids {
		at.id = id.(string)
		r.forget(at)
	}
	b.ids, b.uniqueKeys, b.uniqueIDs, b.jobs = b.ids[:0], b.uniqueKeys[:0], b.uniqueIDs[:0], b.jobs[:0]
	clear(b.results) // let the results go
	b.results = b.results[:0]
}

// writeAck runs ack script s (ackScript, keyAckScript) for jobs finished
// jobs, with retries: those it acknowledged are counted done, or the
// failure is logged (they stay pending and will run again).
func (r *runner) writeAck(s *redis.Script, keys []string, args []any, jobs int) {
	var n int64
	err := r.redisRetry(func(ctx context.Context) error {
		var err error
		n, err = r.write(ctx, s, keys, args...).Int64()
		return err
	})
	if err != nil {
		r.moveFailed(err, jobs, "could not acknowledge finished jobs; they stay pending and will run again")
	} else {
		r.st.Done.Add(n)
	}
}

// ackArgs are ackScript's keys and arguments for batch b of the stream at;
// they take b's histogram (reset).
func (r *runner) ackArgs(at entryKey, b *ackBatch) ([]string, []any) {
	keys := append([]string{r.keys.streamAt(at), r.keys.Stats, r.keys.Done, r.keys.Waiters, r.keys.Results}, b.uniqueKeys...)
	// One allocation of the exact size; retention 0 records nothing.
	args := make([]any, 0, 5+len(b.ids)+2*b.hist.fields()+len(b.uniqueIDs)+len(b.jobs)+len(b.results))
	args = append(append(args, Group, len(b.ids), 0, 0, 0), b.ids...)
	if r.c.Retention > 0 {
		args[3], args[4] = r.c.Retention.Milliseconds(), r.c.RetentionMax
	}
	args, pairs := b.hist.pairs(args)
	args[2] = pairs
	args = append(args, b.uniqueIDs...)
	args = append(args, b.jobs...)
	args = append(args, b.results...)
	return keys, args
}

// giveBack returns entries read but never started, from the stream at
// (an entryKey without id), to their level's stream (triples of entry id,
// runs made, job id). An entry of a key stream goes back to its level's
// stream too, where the next read parks it in its key's stream again.
func (r *runner) giveBack(at entryKey, back []any) {
	if len(back) == 0 {
		return
	}
	defer func() {
		r.survived(recover(), len(back)/3)
		for i := 0; i < len(back); i += 3 {
			at.id = back[i].(string)
			r.forget(at)
		}
	}()
	args := append([]any{Group, r.c.Consumer}, back...)
	keys := []string{r.keys.streamAt(at), r.keys.StreamOf(at.level)}
	err := r.redisRetry(func(ctx context.Context) error {
		return r.write(ctx, backScript, keys, args...).Err()
	})
	if err != nil {
		r.moveFailed(err, len(back)/3, "could not give unstarted jobs back; they stay pending for this slot's next holder")
	}
}

// survive, deferred, recovers a panic while settling j (a bug, or a
// handler's error whose Error method panics): the holder goes on settling
// the other jobs, and j stays pending, where the slot's next holder replays
// it (and dead-letters it as crashed once delivered max_attempts times). A
// panic here would otherwise end the process, and every holder after it
// that replays the job.
func (r *runner) survive(j *Job) {
	if p := recover(); p != nil {
		r.c.Logger.Error().Str("job", j.ID).Str("entry", j.Entry).Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).
			Msg("settling a job panicked; it stays pending for this slot's next holder")
		r.forget(j.key())
	}
}

// survived logs p, a panic recovered while settling a batch of n entries,
// unless nil: they stay pending for the slot's next holder.
func (r *runner) survived(p any, n int) {
	if p != nil {
		r.c.Logger.Error().Int("jobs", n).Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).
			Msg("settling jobs panicked; they stay pending for this slot's next holder")
	}
}

// moveFailed logs a move that could not be written; the entries stay pending.
func (r *runner) moveFailed(err error, jobs int, msg string) {
	if IsFenced(err) {
		r.c.Logger.Error().Err(err).Int("jobs", jobs).Msg("fenced: this holder's lease was lost or taken over, so the write did nothing; the jobs stay pending for the slot's next holder")
		return
	}
	ev := r.c.Logger.Error().Err(err).Int("jobs", jobs)
	if IsOOM(err) {
		ev = r.c.Logger.Warn().Err(err).Int("jobs", jobs).Str("hint", OOMHint)
	}
	ev.Msg(msg)
}

// fail schedules a retry with backoff, or dead-letters the job when it has
// had max_attempts runs; either script adds the run (it took dur) to the
// duration histogram of its outcome.
func (r *runner) fail(j *Job, err error, dur time.Duration) {
	r.st.Failed.Add(1)
	defer r.forget(j.key())
	kind := FailedError
	switch {
	case errors.Is(err, ErrSkipRetry):
		kind = OutcomeRejected
	case timedOut(err):
		kind = FailedTimeout
	case errors.Is(err, ErrCrashed):
		kind = FailedCrashed
	}
	run := runPairs(nil, kind, dur)
	if kind == OutcomeRejected {
		r.deadLetter(j, ReasonRejected, err.Error(), run)
		return
	}
	if j.Attempt >= r.maxAttempts(j) {
		reason := ReasonFailed
		switch kind {
		case FailedTimeout:
			reason = ReasonTimeout
		case FailedCrashed:
			reason = ReasonCrashed
		}
		r.deadLetter(j, reason, err.Error(), run)
		return
	}
	delay := r.backoff(j.Attempt)
	var n int64
	rerr := r.redisRetry(func(ctx context.Context) error {
		var err error
		n, err = r.write(ctx, retryScript, []string{j.stream(r.keys), r.keys.Retry, r.keys.RetryJobs, r.keys.Stats},
			append([]any{Group, j.Entry, r.c.Consumer, delay.Milliseconds(), j.ID, j.Attempt, StatFailedPrefix + kind}, run...)...).Int64()
		return err
	})
	if rerr == nil && n == -2 {
		// Two entries claim one job id and the other one waits for retry
		// under it. Writing over its record would lose it: dead-letter this
		// one instead, under its own entry id, so that nothing of it (its
		// letter, its index entry, a unique key) takes the other's id.
		claimed := j.ID
		j.ID = j.Entry
		r.deadLetter(j, ReasonMalformed, fmt.Sprintf("%v; not retried: its %q field claims job id %s, which another job waiting for retry holds", err, jobField, claimed), run)
		return
	}
	log := r.c.Logger.Warn().Str("job", j.ID).Str("entry", j.Entry).Int("attempt", j.Attempt).Err(err)
	switch {
	case rerr != nil:
		if IsOOM(rerr) {
			log = log.Str("hint", OOMHint)
		}
		log.AnErr("redis", rerr).Msg("job failed; could not schedule its retry: it stays pending and runs again")
	case n == 0:
		log.Msg("job failed; its entry is no longer ours (claimed by another holder): left to it")
	case n < 0:
		log.Msg("job failed; its entry was deleted while it ran: nothing to retry")
	default:
		log.Str("retry_in", delay.String()).Msg("job failed; retry scheduled")
	}
}

// timedOut reports whether err is a job that ran past its timeout.
func timedOut(err error) bool {
	var ee *ExecError
	return errors.Is(err, ErrJobTimeout) || errors.As(err, &ee) && ee.TimedOut
}

// backoff is RetryBackoff·2^(attempt−1), capped, with "equal jitter": half
// fixed, half random, so retries of a burst spread out. It doubles while
// under the cap rather than shifting, so no attempt count (zero, negative,
// huge) and no configured delay can overflow it.
func (r *runner) backoff(attempt int) time.Duration {
	d, most := max(r.c.RetryBackoff, 0), max(r.c.RetryBackoffMax, 0)
	for i := 1; i < attempt && d > 0 && d < most; i++ {
		if d > most/2 {
			d = most
			break
		}
		d *= 2
	}
	d = min(d, most)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// deadLetter moves j to the dead letters with why it died; run are the
// stats pairs of its last run's duration (nil when it never ran). It
// reports whether the job left the stream: lettered here, or settled
// elsewhere meanwhile; false when it stays pending.
func (r *runner) deadLetter(j *Job, reason, why string, run []any) bool {
	defer r.forget(j.key())
	if len(why) > maxErrorLen {
		why = "…" + why[len(why)-maxErrorLen:]
	}
	stream := j.stream(r.keys)
	unique := stream // none
	if j.unique != "" {
		unique = r.keys.Unique(j.unique)
	}
	var n int64
	err := r.redisRetry(func(ctx context.Context) error {
		var err error
		args := append([]any{Group, j.Entry, r.c.Consumer, r.c.DeadMax, j.ID, len(run) / 2}, run...)
		script, keys := deadScript, []string{stream, r.keys.Dead, r.keys.DeadIndex, r.keys.Stats, unique, r.keys.Waiters}
		args = append(args, deadReason, reason, attemptsField, j.Attempt, deadError, why, deadEntry, j.Entry,
			deadFailedAt, time.Now().UnixMilli())
		if j.inBatch() != "" {
			script = batchDeadScript
			keys, args = r.batchDead(j, keys, args)
		}
		n, err = r.write(ctx, script, keys, args...).Int64()
		return err
	})
	log := r.c.Logger
	switch {
	case err != nil:
		r.moveFailed(err, 1, "could not dead-letter job "+j.ID+"; it stays pending")
		return false
	case n == -2:
		// Another job's dead letter holds this job id (two entries claim
		// it): letter this one under its own entry id, never over that one.
		claimed := j.ID
		j.ID = j.Entry
		return r.deadLetter(j, reason, fmt.Sprintf("%s; its %q field claims job id %s, which another job's dead letter holds", why, jobField, claimed), run)
	case n < 0:
		return true // settled elsewhere meanwhile
	case n == 1:
		log.Warn().Int("dead_max", r.c.DeadMax).Msg("dead letters full: dropped the oldest")
	}
	r.st.Dead.Add(1)
	if j.inBatch() != "" {
		r.forwardBatches() // the letter may have completed a batch bound for another queue
	}
	log.Error().Str("job", j.ID).Str("entry", j.Entry).Str("reason", reason).Int("attempts", j.Attempt).Str("error", why).Msg("job dead-lettered")
	return true
}

// redisRetry runs fn until it succeeds, fails permanently, or Redis has
// failed for RedisDownExit.
func (r *runner) redisRetry(fn func(context.Context) error) error {
	backoff := 50 * time.Millisecond
	start := time.Now()
	for {
		err := fn(context.Background())
		if err == nil {
			return nil
		}
		if permanent(err) || time.Since(start) > r.c.RedisDownExit {
			return err
		}
		time.Sleep(backoff)
		backoff = min(backoff*2, 2*time.Second)
	}
}
