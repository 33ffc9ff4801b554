package work

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Per-job fields a producer's options write; reserved, like attempts, orig
// and priority.
const (
	uniqueField      = "unique"       // the job's unique key (without the queue's prefix)
	maxAttemptsField = "max_attempts" // overrides the queue's max_attempts
	timeoutField     = "timeout"      // overrides job_timeout, in milliseconds
)

// Errors of Enqueue.
var (
	// ErrDuplicate is returned, with the id of the job already queued, when
	// a job with the same unique key is waiting, scheduled, running or
	// retrying: nothing was added.
	ErrDuplicate = errors.New("a job with this unique key is already queued")
	// ErrBadOption is a per-job option with an impossible value.
	ErrBadOption = errors.New("bad job option")
)

// DuplicateError lists the jobs of EnqueueMany refused as duplicates, by
// index; their ids are those of the jobs already queued. It wraps
// ErrDuplicate.
type DuplicateError struct{ Jobs []int }

func (e *DuplicateError) Error() string {
	if len(e.Jobs) == 1 {
		return fmt.Sprintf("job %d: %v", e.Jobs[0]+1, ErrDuplicate)
	}
	return fmt.Sprintf("%d jobs: %v", len(e.Jobs), ErrDuplicate)
}

// Unwrap makes errors.Is(err, ErrDuplicate) true.
func (e *DuplicateError) Unwrap() error { return ErrDuplicate }

// Option sets a per-job option of Enqueue.
type Option func(*jobOptions) error

type jobOptions struct {
	due         time.Time // zero: now
	unique      string
	uniqueFor   time.Duration // 0: until done or dead
	maxAttempts int
	timeout     time.Duration
	priority    Priority
}

// In delays the job: it is queued (status counts it as scheduled) and
// moved to the stream by a running holder when d has passed, at most about a
// quarter of a second late. d must not be negative.
func In(d time.Duration) Option {
	return func(o *jobOptions) error {
		if d < 0 {
			return fmt.Errorf("%w: delay %s is negative", ErrBadOption, d)
		}
		o.due = time.Now().Add(d)
		return nil
	}
}

// At runs the job at t; a time in the past runs it now.
func At(t time.Time) Option {
	return func(o *jobOptions) error { o.due = t; return nil }
}

// UniqueKey makes the job unique by key within its queue: while a job with
// the same key is waiting, scheduled, running or retrying, Enqueue adds
// nothing and returns that job's id with ErrDuplicate. The key is released
// when the job is done or dead-lettered, in the same script.
func UniqueKey(key string) Option {
	return func(o *jobOptions) error {
		if key == "" {
			return fmt.Errorf("%w: empty unique key", ErrBadOption)
		}
		o.unique = key
		return nil
	}
}

// UniqueFor bounds how long a unique key is held (default: until the job is
// done or dead). It needs UniqueKey.
func UniqueFor(d time.Duration) Option {
	return func(o *jobOptions) error {
		if d <= 0 {
			return fmt.Errorf("%w: unique-for %s must be positive", ErrBadOption, d)
		}
		o.uniqueFor = d
		return nil
	}
}

// MaxAttempts overrides the queue's max_attempts for this job.
func MaxAttempts(n int) Option {
	return func(o *jobOptions) error {
		if n < 1 || n > 1000 {
			return fmt.Errorf("%w: max attempts %d must be between 1 and 1000", ErrBadOption, n)
		}
		o.maxAttempts = n
		return nil
	}
}

// Timeout overrides the queue's job_timeout for this job.
func Timeout(d time.Duration) Option {
	return func(o *jobOptions) error {
		if d <= 0 {
			return fmt.Errorf("%w: timeout %s must be positive", ErrBadOption, d)
		}
		o.timeout = d
		return nil
	}
}

// Message is one job of EnqueueMany.
type Message struct {
	Payload []byte
	Options []Option
}

// Enqueue adds one job to queue q and returns its id: the job's id for life,
// which BATON_JOB_ID, Job.ID, status and dead letters use. Without options it
// is one XADD; with options, one script. It takes any go-redis client (a
// *redis.Client, a failover or cluster client).
func Enqueue(ctx context.Context, rdb redis.Cmdable, q string, payload []byte, opts ...Option) (string, error) {
	ids, err := EnqueueMany(ctx, rdb, q, []Message{{Payload: payload, Options: opts}})
	if len(ids) == 1 {
		return ids[0], err
	}
	return "", err
}

// EnqueueMany adds jobs in one round trip (a pipeline) and returns their ids
// in order. Options are checked before anything is sent: one bad option adds
// nothing. A job refused as a duplicate gets the existing job's id, and the
// returned error is a *DuplicateError (the other jobs are added); a Redis error
// is returned with the ids of the jobs added before it ("" for the rest).
func EnqueueMany(ctx context.Context, rdb redis.Cmdable, q string, jobs []Message) ([]string, error) {
	type prepared struct {
		opts jobOptions
		plan bool // needs the script
	}
	ps := make([]prepared, len(jobs))
	for i, m := range jobs {
		for _, opt := range m.Options {
			if err := opt(&ps[i].opts); err != nil {
				return nil, fmt.Errorf("job %d: %w", i+1, err)
			}
		}
		o := &ps[i].opts
		if o.uniqueFor > 0 && o.unique == "" {
			return nil, fmt.Errorf("job %d: %w: unique-for needs a unique key", i+1, ErrBadOption)
		}
		ps[i].plan = o.unique != "" || o.maxAttempts > 0 || o.timeout > 0 || !o.due.IsZero() || o.priority != PriorityNormal
	}
	k := KeysFor(q)
	now := time.Now()
	cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, m := range jobs {
			if !ps[i].plan {
				p.XAdd(ctx, &redis.XAddArgs{Stream: k.Stream, Values: []any{PayloadField, m.Payload}})
				continue
			}
			o := ps[i].opts
			due := int64(0)
			if o.due.After(now) {
				due = o.due.UnixMilli()
			}
			uniqueKey := k.Stream // a declared key in the same slot; unused without a unique key
			if o.unique != "" {
				uniqueKey = k.Unique(o.unique)
			}
			args := []any{due, o.unique != "", o.uniqueFor.Milliseconds(), PayloadField, m.Payload}
			if o.unique != "" {
				args = append(args, uniqueField, o.unique)
			}
			if o.maxAttempts > 0 {
				args = append(args, maxAttemptsField, o.maxAttempts)
			}
			if o.timeout > 0 {
				args = append(args, timeoutField, o.timeout.Milliseconds())
			}
			if o.priority != PriorityNormal {
				args = append(args, priorityField, o.priority.String())
			}
			enqueueScript.EvalSha(ctx, p, []string{k.Stream, k.Scheduled, k.ScheduledJobs, uniqueKey, k.StreamOf(o.priority)}, args...)
		}
		return nil
	})
	if err != nil && isNoScript(err) {
		// A Redis that lost (or never had) the script: load it, and send again
		// only what has not been added.
		if lerr := enqueueScript.Load(ctx, rdb).Err(); lerr != nil {
			return nil, scriptingErr("SCRIPT LOAD", lerr)
		}
		return enqueueAgain(ctx, rdb, q, jobs, cmds)
	}
	return enqueued(cmds)
}

// enqueueAgain resends the jobs whose script was not found, keeping the ids
// of those already added.
func enqueueAgain(ctx context.Context, rdb redis.Cmdable, q string, jobs []Message, cmds []redis.Cmder) ([]string, error) {
	ids, _ := enqueued(cmds)
	var again []Message
	var where []int
	for i, c := range cmds {
		if c.Err() != nil && isNoScript(c.Err()) {
			again, where = append(again, jobs[i]), append(where, i)
		}
	}
	more, err := EnqueueMany(ctx, rdb, q, again)
	for j, i := range where {
		if j < len(more) {
			ids[i] = more[j]
		}
	}
	if err != nil {
		return ids, err
	}
	for _, c := range cmds {
		if c.Err() != nil && !isNoScript(c.Err()) {
			return ids, c.Err()
		}
	}
	return ids, nil
}

// enqueued reads the ids from a pipeline's replies.
func enqueued(cmds []redis.Cmder) ([]string, error) {
	ids := make([]string, len(cmds))
	var dup *DuplicateError
	var first error
	for i, c := range cmds {
		switch c := c.(type) {
		case *redis.StringCmd:
			ids[i] = c.Val()
		case *redis.Cmd:
			v, _ := c.Slice()
			if len(v) == 2 {
				ids[i], _ = v[0].(string)
				if n, _ := v[1].(int64); n == 1 {
					if dup == nil {
						dup = &DuplicateError{}
					}
					dup.Jobs = append(dup.Jobs, i)
				}
			}
		}
		if err := c.Err(); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return ids, first
	}
	if dup != nil {
		return ids, dup
	}
	return ids, nil
}

func isNoScript(err error) bool {
	return err != nil && len(err.Error()) >= 8 && err.Error()[:8] == "NOSCRIPT"
}

// jobTimeout reads a job's own timeout field (milliseconds).
func jobTimeout(v any) (time.Duration, bool) {
	ms, err := strconv.ParseInt(fmt.Sprint(v), 10, 64)
	if err != nil || ms <= 0 {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}
