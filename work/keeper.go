package work

import (
	"context"
	"time"
)

// keepEvery is how often the keeper looks for due retries.
const keepEvery = 250 * time.Millisecond

// keep does the holder's upkeep until stop closes: it moves due retries and
// scheduled jobs into the stream (any running holder does, so no extra process is needed),
// and keeps this holder's running entries fresh so that no other holder
// claims them as abandoned.
func (r *runner) keep(stop <-chan struct{}) {
	t := time.NewTicker(keepEvery)
	defer t.Stop()
	var lastBeat time.Time
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if n, err := runScript(ctx, r.c.Client, dueScript,
			[]string{r.keys.Stream, r.keys.Retry, r.keys.RetryJobs, r.keys.Scheduled, r.keys.ScheduledJobs}, time.Now().UnixMilli(), 100).Int(); err != nil {
			r.dueFailed(err)
		} else if n > 0 {
			r.c.Logger.Debug().Int("jobs", n).Msg("moved due retries back into the queue")
		}
		if r.c.VisibilityTimeout > 0 && time.Since(lastBeat) >= r.c.VisibilityTimeout/4 {
			if err := r.heartbeat(ctx); err != nil {
				r.c.Logger.Warn().Err(err).Msg("refresh running jobs")
			} else {
				lastBeat = time.Now()
			}
		}
		cancel()
	}
}

// dueFailed logs a failure to move due retries: at debug while it is a
// passing connection problem, at warn once per keeper when it will repeat
// (OOM, a key of the wrong type). The retries stay scheduled either way.
func (r *runner) dueFailed(err error) {
	if !permanent(err) {
		r.c.Logger.Debug().Err(err).Msg("move due retries")
		return
	}
	if r.dueWarned {
		return
	}
	r.dueWarned = true
	ev := r.c.Logger.Warn().Err(err)
	if IsOOM(err) {
		ev = ev.Str("hint", OOMHint)
	}
	ev.Msg("cannot move due retries back into the queue; they stay scheduled")
}

// heartbeat resets the idle time of every entry this holder has read and not
// settled and that is still pending for this consumer (heartbeatScript): an
// entry another holder claimed meanwhile stays with it.
func (r *runner) heartbeat(ctx context.Context) error {
	r.mu.Lock()
	ids := make([]any, 0, len(r.active))
	for id := range r.active {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	for len(ids) > 0 {
		n := min(len(ids), 100)
		args := append([]any{Group, r.c.Consumer}, ids[:n]...)
		if err := r.write(ctx, heartbeatScript, []string{r.keys.Stream}, args...).Err(); err != nil && !isRedisNil(err) {
			return err
		}
		ids = ids[n:]
	}
	return nil
}
