package work

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Priority orders waiting jobs: a holder takes high jobs before normal ones
// and normal before low, within each read. Each level other than normal
// has a stream of its own (baton:{q}:high, baton:{q}:low), created by the
// first enqueue at that level; a queue that never used them reads exactly
// as before, one stream.
type Priority int8

// Priorities; the zero value is normal.
const (
	PriorityNormal Priority = iota
	PriorityHigh
	PriorityLow
)

// readOrder is the order a holder reads the levels in.
var readOrder = [...]Priority{PriorityHigh, PriorityNormal, PriorityLow}

// priorityField carries a job's level in its entry, retry record and dead
// letter, so that a retry, a scheduled job and a requeued dead letter go
// back to the stream of their level. Reserved.
const priorityField = "priority"

func (p Priority) String() string {
	switch p {
	case PriorityHigh:
		return "high"
	case PriorityLow:
		return "low"
	}
	return "normal"
}

// ParsePriority reads "high", "normal" or "low".
func ParsePriority(s string) (Priority, error) {
	switch s {
	case "high":
		return PriorityHigh, nil
	case "normal", "":
		return PriorityNormal, nil
	case "low":
		return PriorityLow, nil
	}
	return PriorityNormal, fmt.Errorf("%w: priority %q: want high, normal or low", ErrBadOption, s)
}

// WithPriority sets the job's priority (default normal).
func WithPriority(p Priority) Option {
	return func(o *jobOptions) error {
		if p < PriorityNormal || p > PriorityLow {
			return fmt.Errorf("%w: priority %d: want PriorityHigh, PriorityNormal or PriorityLow", ErrBadOption, p)
		}
		o.priority = p
		return nil
	}
}

// StreamOf is the stream of jobs waiting at priority p.
func (k Keys) StreamOf(p Priority) string {
	switch p {
	case PriorityHigh:
		return k.High
	case PriorityLow:
		return k.Low
	}
	return k.Stream
}

// takeScript reads up to n new entries, strictly by level: high ones first,
// then normal, then low, without blocking. XREADGROUP cannot block in a
// script; the reader blocks outside it when all levels are empty.
//
// KEYS the streams in read order; ARGV[1] group, ARGV[2] consumer, ARGV[3] n.
// Returns XREADGROUP's reply shape: {{stream, {{id, {field, value, …}}, …}}, …}.
var takeScript = redis.NewScript(`
local left, out = tonumber(ARGV[3]), {}
for _, s in ipairs(KEYS) do
  if left <= 0 then break end
  if redis.call('EXISTS', s) == 1 then
    local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', left, 'STREAMS', s, '>')
    if r and r[1] then
      out[#out + 1] = r[1]
      left = left - #r[1][2]
    end
  end
end
return out
`)

// readLevels reads up to n new entries of every level, high first: one
// script call when any waits, else one blocking read of the three streams.
func (r *runner) readLevels(ctx context.Context, n int64, block time.Duration) ([]*Job, error) {
	keys := []string{r.keys.High, r.keys.Stream, r.keys.Low}
	v, err := runScript(ctx, r.c.Client, takeScript, keys, Group, r.c.Consumer, n).Slice()
	if r.regrouped(ctx, err) {
		v, err = runScript(ctx, r.c.Client, takeScript, keys, Group, r.c.Consumer, n).Slice()
	}
	if err != nil {
		return nil, err
	}
	jobs := r.scriptJobs(v)
	if len(jobs) > 0 {
		return jobs, nil
	}
	// XREADGROUP fails at once (NOGROUP) while any of the three streams or
	// its group is missing: a level never used (a queue that used only
	// high has no low stream), a stream deleted, a group destroyed. Then
	// all three are created and the read blocks as it should.
	args := &redis.XReadGroupArgs{
		Group: Group, Consumer: r.c.Consumer, Streams: append(keys, ">", ">", ">"),
		Count: n, Block: block,
	}
	res, err := r.c.Client.XReadGroup(ctx, args).Result()
	if r.regrouped(ctx, err) {
		res, err = r.c.Client.XReadGroup(ctx, args).Result()
	}
	if isRedisNil(err) || (err != nil && ctx.Err() != nil) {
		return nil, nil
	}
	return append(jobs, r.streamJobs(res)...), err
}

// streamJobs are the jobs of XREADGROUP's new entries, each stream's at
// its level (and in its key, for a key stream).
func (r *runner) streamJobs(res []redis.XStream) []*Job {
	var jobs []*Job
	for _, s := range res {
		level, key := r.streamOf(s.Stream)
		for _, m := range s.Messages {
			jobs = append(jobs, r.toJobIn(m, 1, level, key))
		}
	}
	return jobs
}

// streamOf is the level of one of the queue's streams, and its key for a
// key stream ("" for a level stream). The level streams are compared
// first: a queue without keys parses nothing.
func (r *runner) streamOf(stream string) (Priority, string) {
	switch stream {
	case r.keys.Stream:
		return PriorityNormal, ""
	case r.keys.High:
		return PriorityHigh, ""
	case r.keys.Low:
		return PriorityLow, ""
	}
	if p, key, ok := r.keys.keyOfStream(stream); ok {
		return p, key
	}
	return PriorityNormal, ""
}

// scriptJobs turns takeScript's reply into jobs, in its order.
func (r *runner) scriptJobs(v []any) []*Job {
	var jobs []*Job
	for _, s := range v {
		s, _ := s.([]any)
		if len(s) != 2 {
			continue
		}
		name, _ := s[0].(string)
		msgs, _ := s[1].([]any)
		p, key := r.streamOf(name)
		for _, m := range msgs {
			m, _ := m.([]any)
			if len(m) != 2 {
				continue
			}
			id, _ := m[0].(string)
			kv, _ := m[1].([]any)
			values := make(map[string]any, len(kv)/2)
			for i := 0; i+1 < len(kv); i += 2 {
				k, _ := kv[i].(string)
				values[k] = kv[i+1]
			}
			jobs = append(jobs, r.toJobIn(redis.XMessage{ID: id, Values: values}, 1, p, key))
		}
	}
	return jobs
}
