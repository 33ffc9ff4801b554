package work

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
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
		r.moveDue(ctx)
		r.writeProgress(ctx)
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

// moveDue moves due retries and scheduled jobs into the streams, and
// learns from the same call whether the queue has high or low jobs. The
// same round trip (a pipeline) reads the queue's pause and its cancels of
// running jobs: pause and cancel cost the hot path nothing per job.
func (r *runner) moveDue(ctx context.Context) {
	var due *redis.Cmd
	var pause *redis.MapStringStringCmd
	var cancels *redis.MapStringStringCmd
	var rings, outbox, streams *redis.IntCmd
	_, _ = r.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		due = dueScript.EvalSha(ctx, p, r.keys.due(), 100)
		rings = p.Exists(ctx, r.keys.rings()...)
		pause = p.HGetAll(ctx, r.keys.Paused)
		cancels = p.HGetAll(ctx, r.keys.Cancel)
		outbox = p.LLen(ctx, r.keys.chainOutbox())
		streams = p.Exists(ctx, r.keys.KeyStreams())
		return nil
	})
	if n, err := streams.Result(); err == nil {
		r.keyStreams.Store(n > 0)
	}
	if outbox.Val() > 0 {
		r.forwardChains() // a settle released jobs chained in other queues
	}
	if pause.Err() == nil {
		r.pauseSeen(pause.Val())
	}
	r.keysSeen(rings.Val())
	if cancels.Err() == nil {
		r.cancelSeen(cancels.Val())
	}
	if err := due.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		due = runScript(ctx, r.c.Client, dueScript, r.keys.due(), 100) // loads it
	}
	v, err := due.Int64Slice()
	if err == nil && len(v) != 3 {
		err = fmt.Errorf("due script replied %v", v)
	}
	if err != nil {
		r.dueFailed(err)
		return
	}
	if v[0] > 0 {
		r.c.Logger.Debug().Int64("jobs", v[0]).Msg("moved due retries back into the queue")
	}
	if v[1] > 0 {
		r.c.Logger.Warn().Int64("jobs", v[1]).Msg("could not move due jobs into the queue (a record too large, or a key of the wrong type); trying them again in a minute")
	}
	if v[2] == 1 && !r.levels.Swap(true) {
		r.c.Logger.Info().Msg("queue has jobs of high or low priority: reading every level")
	}
}

// due is dueScript's keys.
func (k Keys) due() []string {
	return []string{k.Stream, k.High, k.Low, k.Retry, k.RetryJobs, k.Scheduled, k.ScheduledJobs}
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
// entry another holder claimed meanwhile stays with it. One script call
// per about 100 entries, whatever streams (levels', keys') they are in.
func (r *runner) heartbeat(ctx context.Context) error {
	var ids [3][]any             // by level
	var keyed map[entryKey][]any // entries of key streams, by stream
	r.mu.Lock()
	for k := range r.active {
		if k.key == "" {
			ids[k.level] = append(ids[k.level], k.id)
			continue
		}
		if keyed == nil {
			keyed = map[entryKey][]any{}
		}
		keyed[k.at()] = append(keyed[k.at()], k.id)
	}
	r.mu.Unlock()
	var b beats
	for level, ids := range ids {
		if err := b.add(ctx, r, r.keys.StreamOf(Priority(level)), ids); err != nil {
			return err
		}
	}
	for at, ids := range keyed {
		if err := b.add(ctx, r, r.keys.streamAt(at), ids); err != nil {
			return err
		}
	}
	return b.send(ctx, r)
}

// beats is one heartbeatScript call being filled.
type beats struct {
	streams []string
	args    []any
	n       int // entry ids in args
}

// add adds the entries ids of stream, sending a call whenever it holds 100.
func (b *beats) add(ctx context.Context, r *runner, stream string, ids []any) error {
	for len(ids) > 0 {
		n := min(len(ids), 100-b.n)
		if b.args == nil {
			b.args = []any{Group, r.c.Consumer}
		}
		b.streams = append(b.streams, stream)
		b.args = append(append(b.args, n), ids[:n]...)
		b.n += n
		ids = ids[n:]
		if b.n >= 100 {
			if err := b.send(ctx, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// send makes the call, if any entry waits, and empties b.
func (b *beats) send(ctx context.Context, r *runner) error {
	if b.n == 0 {
		return nil
	}
	err := r.write(ctx, heartbeatScript, b.streams, b.args...).Err()
	b.streams, b.args, b.n = b.streams[:0], b.args[:2], 0
	if err != nil && !isRedisNil(err) {
		return err
	}
	return nil
}
