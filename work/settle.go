package work

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"
)

// maxErrorLen bounds the error text kept with a dead letter.
const maxErrorLen = 2048

// settle records every outcome in Redis: successes are acknowledged in
// batches (whatever is waiting goes in one script call), failures are
// scheduled for retry or dead-lettered. A Redis error is retried until
// RedisDownExit; meanwhile the entry stays pending, so it can run again but
// never vanish.
func (r *runner) settle() {
	ids := make([]any, 0, 256)
	flush := func() {
		if len(ids) == 0 {
			return
		}
		args := append([]any{Group}, ids...)
		err := r.redisRetry(func(ctx context.Context) error {
			return ackScript.Run(ctx, r.c.Client, []string{r.keys.Stream, r.keys.Stats}, args...).Err()
		})
		if err != nil {
			r.c.Logger.Error().Err(err).Int("jobs", len(ids)).Msg("ack failed; these jobs stay pending and will run again")
		}
		for _, id := range ids {
			r.forget(id.(string))
		}
		ids = ids[:0]
	}
	var back []any
	giveBack := func() {
		if len(back) == 0 {
			return
		}
		args := append([]any{Group}, back...)
		err := r.redisRetry(func(ctx context.Context) error {
			return backScript.Run(ctx, r.c.Client, []string{r.keys.Stream}, args...).Err()
		})
		if err != nil {
			r.c.Logger.Warn().Err(err).Int("jobs", len(back)/4).Msg("could not give unstarted jobs back; they stay pending for this slot's next holder")
		}
		for i := 0; i < len(back); i += 4 {
			r.forget(back[i].(string))
		}
		back = back[:0]
	}
	one := func(res result) {
		switch {
		case res.back:
			back = append(back, res.job.ID, res.job.Payload, res.job.Attempt-1, res.job.orig)
		case res.dead != "":
			r.deadLetter(res.job, res.dead, res.job.problem)
		case res.err == nil:
			r.st.Done.Add(1)
			ids = append(ids, res.job.ID)
		default:
			r.fail(res.job, res.err)
		}
	}
	for res := range r.results {
		one(res)
	more:
		for len(ids) < cap(ids) {
			select {
			case res, ok := <-r.results:
				if !ok {
					break more
				}
				one(res)
			default:
				break more
			}
		}
		flush()
		giveBack()
	}
	flush()
	giveBack()
}

// fail schedules a retry with backoff, or dead-letters the job when it has
// had max_attempts runs.
func (r *runner) fail(j *Job, err error) {
	r.st.Failed.Add(1)
	defer r.forget(j.ID)
	if j.Attempt >= r.c.MaxAttempts {
		reason := ReasonFailed
		var ee *ExecError
		if errors.As(err, &ee) && ee.TimedOut {
			reason = ReasonTimeout
		}
		r.deadLetter(j, reason, err.Error())
		return
	}
	delay := r.backoff(j.Attempt)
	member := j.ID + "|" + strconv.Itoa(j.Attempt) + "|" + j.orig + "|" + string(j.Payload)
	due := time.Now().Add(delay).UnixMilli()
	rerr := r.redisRetry(func(ctx context.Context) error {
		return retryScript.Run(ctx, r.c.Client, []string{r.keys.Stream, r.keys.Retry, r.keys.Stats},
			Group, j.ID, due, member).Err()
	})
	log := r.c.Logger.Warn().Str("job", j.ID).Int("attempt", j.Attempt).Err(err)
	if rerr != nil {
		log.AnErr("redis", rerr).Msg("job failed; could not schedule its retry: it stays pending and runs again")
		return
	}
	log.Dur("retry_in", delay).Msg("job failed; retry scheduled")
}

// backoff is RetryBackoff·2^(attempt−1), capped, with "equal jitter": half
// fixed, half random, so retries of a burst spread out.
func (r *runner) backoff(attempt int) time.Duration {
	d := r.c.RetryBackoffMax
	if attempt-1 < 40 {
		d = min(r.c.RetryBackoff<<(attempt-1), r.c.RetryBackoffMax)
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// deadLetter moves j to the dead-letter stream with why it died.
func (r *runner) deadLetter(j *Job, reason, why string) {
	defer r.forget(j.ID)
	if len(why) > maxErrorLen {
		why = "…" + why[len(why)-maxErrorLen:]
	}
	fields := []any{"reason", reason, "attempts", j.Attempt, "error", why, "id", j.ID, "orig", j.orig,
		"failed_at", time.Now().UnixMilli()}
	if j.verdict != ReasonMalformed {
		fields = append(fields, PayloadField, j.Payload)
	}
	var n int64
	err := r.redisRetry(func(ctx context.Context) error {
		var err error
		n, err = deadScript.Run(ctx, r.c.Client, []string{r.keys.Stream, r.keys.Dead, r.keys.Stats},
			append([]any{Group, j.ID, r.c.DeadMax}, fields...)...).Int64()
		return err
	})
	log := r.c.Logger
	switch {
	case err != nil:
		log.Error().Err(err).Str("job", j.ID).Msg("could not dead-letter the job; it stays pending")
		return
	case n < 0:
		return // settled elsewhere meanwhile
	case n == 1:
		log.Warn().Int("dead_max", r.c.DeadMax).Msg("dead-letter stream full: dropped the oldest dead letter")
	}
	r.st.Dead.Add(1)
	log.Error().Str("job", j.ID).Str("reason", reason).Int("attempts", j.Attempt).Str("error", why).Msg("job dead-lettered")
}

// redisRetry runs fn until it succeeds or Redis has failed for RedisDownExit.
func (r *runner) redisRetry(fn func(context.Context) error) error {
	backoff := 50 * time.Millisecond
	start := time.Now()
	for {
		err := fn(context.Background())
		if err == nil {
			return nil
		}
		if time.Since(start) > r.c.RedisDownExit {
			return err
		}
		time.Sleep(backoff)
		backoff = min(backoff*2, 2*time.Second)
	}
}
