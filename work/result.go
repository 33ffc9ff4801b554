package work

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// DefaultResultMax is the largest result a job may hand back (result_max),
// in bytes: 64 KiB.
const DefaultResultMax = 64 << 10

// MaxResultMax is the highest result_max allowed: a result is one Redis
// string and one body of the worker protocol.
const MaxResultMax = maxBody

// Errors of results.
var (
	// ErrResultTooLarge is the error of a job whose result is over
	// result_max: the job fails (retried, then dead-lettered), and nothing
	// of the result is kept.
	ErrResultTooLarge = errors.New("result over result_max")
	// ErrNoJob is SetResult or Progress called with a context that is not
	// a job's (a handler's, or one derived from it).
	ErrNoJob = errors.New("no job in this context")
	// ErrNotDone is Result of a job that is not done (yet): waiting,
	// running, scheduled, retrying or dead.
	ErrNotDone = errors.New("job not done")
	// ErrUnknownJob is Result or Wait of a job that is not known: done and
	// not kept (retention), or never enqueued on the queue.
	ErrUnknownJob = errors.New("job unknown")
)

// jobKey is the context key of the running job (SetResult, Progress).
type jobKey struct{}

// withJob is ctx with j as its running job: a Go handler's context, so
// that code given only ctx can SetResult and Progress. It lives in j (no
// allocation per job, unlike context.WithValue).
func withJob(ctx context.Context, j *Job) context.Context {
	j.ctx = jobContext{Context: ctx, j: j}
	return &j.ctx
}

// jobContext is a context that carries its job; every other value, its
// deadline and its cancel are its parent's.
type jobContext struct {
	context.Context
	j *Job
}

func (c *jobContext) Value(key any) any {
	if key == (jobKey{}) {
		return c.j
	}
	return c.Context.Value(key)
}

// jobOf is the job ctx runs, or nil.
func jobOf(ctx context.Context) *Job {
	j, _ := ctx.Value(jobKey{}).(*Job)
	return j
}

// SetResult hands b back as the result of the job ctx runs (a handler's
// context): once the job is done, Result and Wait return it, and `baton job
// ID --result` prints it, for the queue's retention. A later call replaces
// an earlier one; b is copied. A result over result_max (Config.ResultMax)
// returns ErrResultTooLarge and fails the job when it returns, whatever it
// returns: nothing is ever truncated. A job that sets no result costs
// nothing.
func SetResult(ctx context.Context, b []byte) error {
	j := jobOf(ctx)
	if j == nil {
		return ErrNoJob
	}
	return j.SetResult(b)
}

// SetResult is the package's SetResult for a handler that has its Job.
func (j *Job) SetResult(b []byte) error {
	c := append([]byte{}, b...)
	j.result.Store(&c)
	if j.resultMax > 0 && len(b) > j.resultMax {
		return resultTooLarge(len(b), j.resultMax)
	}
	return nil
}

// Result is the result the job handed back so far (SetResult, a
// persistent child's result body, an exec job's BATON_RESULT_FILE), nil
// when none.
func (j *Job) Result() []byte {
	if p := j.result.Load(); p != nil {
		return *p
	}
	return nil
}

func resultTooLarge(n, most int) error {
	return fmt.Errorf("%w: the job's result is %d bytes, result_max is %d (raise result_max, or keep large results elsewhere and return a reference)", ErrResultTooLarge, n, most)
}

// checkResult is a finished job's error with its result judged: a success
// whose result is over result_max fails.
func (r *runner) checkResult(j *Job, err error) error {
	if err != nil || j.result.Load() == nil {
		return err
	}
	if n := len(j.Result()); n > r.c.ResultMax {
		return resultTooLarge(n, r.c.ResultMax)
	}
	return nil
}

// jobResults is what a job carries about its result and progress; its zero
// value is none. Part of Job.
type jobResults struct {
	result    atomic.Pointer[[]byte]       // set by the handler, read once it returned
	note      atomic.Pointer[ProgressNote] // the latest progress; set by the handler, read by the keeper and the publisher
	resultMax int                          // Config.ResultMax, set before the job runs
	noted     *atomic.Bool                 // the runner's "a progress changed" flag, set before the job runs
	ctx       jobContext                   // the Go handler's context (withJob)
}

// Result returns the result of job id of queue q: the bytes it handed back
// (nil when it set none) once it is done, for the queue's retention
// (results are kept only with a retention). A job not done returns
// ErrNotDone (its state in the error), a job not known ErrUnknownJob.
func Result(ctx context.Context, rdb redis.Cmdable, q, id string) ([]byte, error) {
	k := KeysFor(q)
	v, err := runScript(ctx, rdb, resultScript, []string{k.Done, k.Results}, id).Slice()
	if err != nil {
		return nil, fmt.Errorf("result of job %s: %w", id, err)
	}
	if v[0].(int64) == 1 {
		if s, ok := v[1].(string); ok {
			return []byte(s), nil
		}
		return nil, nil
	}
	loc, err := Locate(ctx, rdb, q, id)
	switch {
	case err != nil:
		return nil, fmt.Errorf("result of job %s: %w", id, err)
	case loc.State == StateDone: // done meanwhile
		return Result(ctx, rdb, q, id)
	case loc.State == StateUnknown:
		return nil, fmt.Errorf("result of job %s: %w on queue %s (done and not kept: see retention; or never enqueued here)", id, ErrUnknownJob, q)
	}
	return nil, fmt.Errorf("result of job %s: %w: it is %s", id, ErrNotDone, loc.State)
}

// resultScript reads a done job's result (lua/result.lua).
var resultScript = redis.NewScript(resultLua)
