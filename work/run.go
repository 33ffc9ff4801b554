package work

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-run/baton/tracing"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
)

// Config is one holder's job loop.
type Config struct {
	Client   redis.UniversalClient // a *redis.Client, or a failover or cluster client
	Queue    string
	Consumer string // the slot's identity, e.g. "host/run-2"
	Handler  Handler

	// JobTimeout bounds one run of a job: the handler's context is cancelled
	// then (with cause ErrJobTimeout), and a handler that returns an error
	// after it is counted as a timeout (retried; dead letter "timeout" after
	// the last attempt). A job's own timeout (Job.Timeout) overrides it. A
	// handler that ignores its context is stopped by the caller's hard
	// deadline. 0: none (baton run's job_timeout defaults to
	// DefaultJobTimeout). The exec handler enforces timeouts itself
	// (Exec.Timeout or Job.Timeout: SIGTERM, then SIGKILL).
	JobTimeout time.Duration
	// Concurrency is jobs at once. Default 1.
	Concurrency int
	// Deadline is the end of the lifetime: reading stops then. Zero: none.
	Deadline time.Time
	// Grace is how long in-flight jobs may finish once reading stopped;
	// then their contexts are cancelled. Default 30s.
	Grace time.Duration
	// MaxJobs stops reading after about this many jobs, perturbed ±10% so that
	// holders do not recycle together. 0: unlimited.
	MaxJobs int
	// Batch is the most entries one read returns. Default 128.
	Batch int
	// Block is the longest one blocking read waits. Default 1s.
	Block time.Duration
	// RedisDownExit is how long Redis may fail before Run gives up. Default 30s.
	RedisDownExit time.Duration
	// MaxAttempts is how many runs a job gets before it is dead-lettered. Default 5.
	MaxAttempts int
	// RetryBackoff is the first retry's delay, doubling per attempt up to
	// RetryBackoffMax, with jitter. Defaults 1s and 10m.
	RetryBackoff, RetryBackoffMax time.Duration
	// DeadMax bounds the dead-letter stream. Default 10000.
	DeadMax int
	// Retention is how long a done job is remembered (its id and when it
	// was done, in the sorted set Keys.Done), so Locate can say "done".
	// 0 (or under 1 ms): done jobs are not kept. Default 0.
	Retention time.Duration
	// RetentionMax bounds the done records; the oldest are dropped first.
	// Default 100000.
	RetentionMax int
	// RateLimit caps how many jobs start per unit of time across every
	// holder of the queue, in Redis: a job over the limit waits in the
	// queue; it is never failed nor counted as an attempt. Zero: no limit.
	RateLimit Rate
	// MaxPayload is the largest payload run; bigger ones are dead-lettered
	// as too_large. Default 1 MiB.
	MaxPayload int
	// ResultMax is the largest result a job may hand back (SetResult), in
	// bytes: a job with a larger one fails with ErrResultTooLarge. Results
	// are kept with the done records, for Retention. Default
	// DefaultResultMax (64 KiB), at most MaxResultMax.
	ResultMax int
	// VisibilityTimeout: entries of other consumers pending and untouched this
	// long are claimed (their holder is gone for good). Running jobs are kept
	// fresh so they are never taken from a live holder. 0: never claim.
	VisibilityTimeout time.Duration
	Logger            zerolog.Logger
	// Fence, in fleet mode, is the holder's lease: every write for a job is
	// checked against it in Redis, and each job gets its token (Job.Fence).
	// nil: no fencing (flock slots on one machine).
	Fence *Fence
	// TracerProvider, when set, makes a consumer span per run of a job
	// (package tracing), a child of the span that enqueued it. nil: no
	// spans, at no cost per job; a job's stored trace context still
	// reaches its code (TRACEPARENT, the handler's context).
	TracerProvider trace.TracerProvider
	// KeyCaps are the per-key caps (docs/keys.md). Zero: keys take turns,
	// uncapped.
	KeyCaps KeyCaps
}

// Errors of Run.
var (
	// ErrRedisDown is returned when Redis kept failing for RedisDownExit.
	ErrRedisDown = errors.New("redis unavailable")
	// ErrJobTimeout is the cause of a handler context cancelled at
	// JobTimeout, and wrapped in the error of a job that ran past it.
	ErrJobTimeout = errors.New("job timed out")
	// ErrSkipRetry, wrapped in a handler's error, says the failure is final:
	// the job is dead-lettered at once with reason "rejected".
	ErrSkipRetry = errors.New("do not retry")
	// ErrCrashed, wrapped in a handler's error, says the process running the
	// job died under it: the job is retried, and dead-lettered as "crashed"
	// after the last attempt.
	ErrCrashed = errors.New("worker died mid-job")
	// ErrCancelled is the cause of a handler context cancelled because the
	// job was cancelled (baton cancel, Cancel): the job is dead-lettered as
	// "cancelled" whatever the handler returns, and never retried.
	ErrCancelled = errors.New("job cancelled")
	// ErrHandlerDown, wrapped in a handler's error, says the handler cannot
	// run any job (a persistent child that will not start): the job goes
	// back to the stream unrun, reading stops, the other running jobs
	// finish, and Run returns the error.
	ErrHandlerDown = errors.New("handler cannot run jobs")
)

// errUnstarted, wrapped in a handler's error, says the job never started
// (its persistent child was still starting when the grace ended): it goes
// back to the stream unrun, no attempt counted.
var errUnstarted = errors.New("job not started")

// Config's defaults, for a field left zero. baton's config keys of the
// same names start from them (internal/config.Default), and there is no
// other copy. JobTimeout has none here (0: no limit); job_timeout's default
// is DefaultJobTimeout, which baton run passes.
const (
	DefaultJobTimeout      = time.Minute
	DefaultGrace           = 30 * time.Second
	DefaultRedisDownExit   = 30 * time.Second
	DefaultMaxAttempts     = 5
	DefaultRetryBackoff    = time.Second
	DefaultRetryBackoffMax = 10 * time.Minute
	DefaultDeadMax         = 10000
	DefaultRetentionMax    = 100000
	DefaultMaxPayload      = 1 << 20
)

func (c *Config) defaults() {
	if c.Concurrency < 1 {
		c.Concurrency = 1
	}
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.Batch < 1 {
		c.Batch = 128
	}
	if c.Block <= 0 {
		c.Block = time.Second
	}
	if c.RedisDownExit <= 0 {
		c.RedisDownExit = DefaultRedisDownExit
	}
	if c.MaxAttempts < 1 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	if c.RetryBackoffMax < c.RetryBackoff {
		c.RetryBackoffMax = max(DefaultRetryBackoffMax, c.RetryBackoff)
	}
	if c.DeadMax < 1 {
		c.DeadMax = DefaultDeadMax
	}
	if c.Retention < time.Millisecond {
		c.Retention = 0
	}
	if c.RetentionMax < 1 {
		c.RetentionMax = DefaultRetentionMax
	}
	if c.MaxPayload < 1 {
		c.MaxPayload = DefaultMaxPayload
	}
	if c.ResultMax < 1 || c.ResultMax > MaxResultMax {
		c.ResultMax = min(max(c.ResultMax, DefaultResultMax), MaxResultMax)
	}
}

// Stats is a running holder's progress; safe to read from any goroutine.
type Stats struct {
	Done   atomic.Int64        // jobs finished successfully
	Failed atomic.Int64        // runs whose handler returned an error
	Dead   atomic.Int64        // jobs this holder dead-lettered
	Recent atomic.Pointer[Job] // the most recently started job still running, or nil
}

// Run drains the queue until the deadline, MaxJobs, or ctx is done, then lets
// in-flight jobs finish within Grace and acknowledges them. Entries read but
// not started go back to the stream as new entries (no delivery counted
// against them); a job cut short by the end of Grace stays pending for the
// slot's next holder. It returns nil when it
// stopped at the deadline or MaxJobs, ctx.Err() when ctx ended it, and an
// error when Redis stayed down.
func Run(ctx context.Context, c Config, st *Stats) error {
	c.defaults()
	if st == nil {
		st = new(Stats)
	}
	r := &runner{
		c:       c,
		st:      st,
		keys:    KeysFor(c.Queue),
		jobs:    make(chan *Job, max(c.Batch, c.Concurrency)),
		results: make(chan result, max(c.Batch, c.Concurrency)),
		space:   make(chan struct{}, 1),
		stopped: make(chan struct{}),
		active:  map[entryKey]*Job{},

		claimFrom: [3]string{"0-0", "0-0", "0-0"},
	}
	if c.Fence != nil {
		r.fence, r.held = c.Fence.Token, c.Fence.Held
	}
	r.tracer = tracing.NewConsumer(c.TracerProvider, c.Queue, Group, c.Consumer)
	r.kk.limits = packLimits(c.KeyCaps.Limits)
	// Assume slow jobs until measured otherwise: read one per worker at first.
	r.meanNS.Store(int64(time.Second))
	return r.run(ctx)
}

// result is a job's outcome, sent to the settler.
type result struct {
	job  *Job
	dur  time.Duration // how long the handler ran
	err  error         // the handler's error, nil on success
	dead string        // set by the reader: dead-letter without running, for this reason
	back bool          // read but never started: give it back to the stream
}

// runner's goroutines: one reader (owns jobs and closes it), Concurrency
// workers (send on results), one settler (reads results until run closes
// them), one keeper (periodic upkeep, stopped by run).
type runner struct {
	c       Config
	st      *Stats
	keys    Keys
	fence   int64             // every job's Fence: c.Fence's token, 0 without one
	tracer  *tracing.Consumer // the runs' spans; nil: tracing off
	jobs    chan *Job
	results chan result
	space   chan struct{} // a worker finished: the reader may read more

	inflight atomic.Int64 // read and not yet finished
	meanNS   atomic.Int64 // moving mean of handler time, for the read window

	claimFrom [3]string   // XAUTOCLAIM cursors, by level; the reader's own
	levels    atomic.Bool // the queue has high or low jobs' streams: read all three
	dueWarned bool        // the keeper warned that due retries cannot move; the keeper's own
	announce  bool        // the first replay is not yet logged at info; the reader's own
	inherited bool        // replaying what the slot's previous holder left (not what a lost reply left); the reader's own

	keysListed bool        // keysReplay is listed for this replay phase; the reader's own
	keyStreams atomic.Bool // key streams exist (KeyStreams), as readAtStart and the keeper saw: claim looks at them
	keysReplay []entryKey  // key streams (entryKeys without id) with entries of this consumer's left to replay; the reader's own

	mu      sync.Mutex
	active  map[entryKey]*Job // entries read and not yet settled; guarded by mu
	workers []*worker         // one per worker goroutine, for the keeper's cancels; guarded by mu
	cancels map[string]string // the latest cancel requests read (job id → why), nil when none; guarded by mu

	kk keyState // keys (key_read.go)

	// The lease as the holder's own clocks see it (fence.go).
	held      Holding       // c.Fence.Held: nil without one
	heldFor   time.Duration // the lease's time left at the last read's check (leaseHeld); the reader's own
	lapseOnce sync.Once     // the lease's lapse is logged once

	paused atomic.Bool  // the queue is paused: start nothing; set by the keeper
	down   atomic.Int64 // unix ns when Redis started failing, 0 when fine

	noted atomic.Bool              // a running job's progress changed: the keeper writes it
	shown map[string]progressShown // progress written to Redis, by job id; the keeper's own

	stopOnce sync.Once
	stopped  chan struct{} // closed when reading must stop
	why      string        // set once before stopped closes
	fatal    error         // set once before stopped closes, or nil
}

func (r *runner) stop(why string, err error) {
	r.stopOnce.Do(func() {
		r.why, r.fatal = why, err
		close(r.stopped)
	})
}

func (r *runner) draining() bool {
	select {
	case <-r.stopped:
		return true
	default:
		return false
	}
}

func (r *runner) run(ctx context.Context) error {
	log := r.c.Logger
	if err := Prepare(ctx, r.c.Client, r.keys); err != nil {
		return err
	}
	r.readAtStart(ctx)
	// Handlers get their own context: a drain must not cancel running jobs,
	// only the end of the grace period does.
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()

	var untilDeadline <-chan time.Time
	if !r.c.Deadline.IsZero() {
		t := time.NewTimer(time.Until(r.c.Deadline))
		defer t.Stop()
		untilDeadline = t.C
	}
	go func() {
		select {
		case <-ctx.Done():
			r.stop("signal", nil)
		case <-untilDeadline:
			r.stop("lifetime", nil)
		case <-r.stopped:
		}
	}()

	var workers, reader sync.WaitGroup
	for i := 0; i < r.c.Concurrency; i++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			r.work(hctx)
		}()
	}
	ackDone := make(chan struct{})
	go func() {
		defer close(ackDone)
		r.settle()
	}()
	keeperStop, keeperDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(keeperDone)
		r.keep(keeperStop)
	}()
	reader.Add(1)
	go func() {
		defer reader.Done()
		defer close(r.jobs)
		r.read(ctx)
	}()

	workersDone := make(chan struct{})
	go func() {
		workers.Wait()
		close(workersDone)
	}()
	select {
	case <-r.stopped: // lifetime, signal or Redis: drain
	case <-workersDone: // the reader stopped at max_jobs and every job read is done
	}
	select {
	case <-workersDone:
	default:
		log.Debug().Str("reason", r.why).Msg("stopped reading; finishing in-flight jobs")
		graceEnd := time.AfterFunc(r.c.Grace, func() {
			log.Warn().Dur("shutdown_grace", r.c.Grace).Msg("grace period over: cancelling in-flight jobs")
			cancelHandlers()
		})
		<-workersDone
		graceEnd.Stop()
	}
	r.stop("max_jobs", nil) // no-op when already stopped; frees the watcher goroutine
	reader.Wait()
	close(r.results)
	<-ackDone
	r.flushKeyDrops()
	close(keeperStop)
	<-keeperDone
	if r.fatal != nil {
		return r.fatal
	}
	if r.why == "signal" {
		return ctx.Err()
	}
	return nil
}

// readAtStart reads, in one round trip before the first read, what the
// keeper keeps current from then on:
//   - whether the queue has high or low jobs' streams (the keeper's due
//     script keeps it current);
//   - whether keys have waiting jobs: then the first read takes turns at
//     once rather than after a blocking read of the (empty) stream;
//   - the pause: a holder that starts on a paused queue starts nothing (and
//     says so once);
//   - the cancel requests: a job it replays or claims (left pending by a
//     holder that could not stop it: killed, past its hard deadline) is
//     dead-lettered unrun, not started again;
//   - whether key streams exist: if not, the first replay lists none.
func (r *runner) readAtStart(ctx context.Context) {
	var levels, rings, streams *redis.IntCmd
	var paused, cancels *redis.MapStringStringCmd
	_, _ = r.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		levels = p.Exists(ctx, r.keys.High, r.keys.Low)
		rings = p.Exists(ctx, r.keys.rings()...)
		streams = p.Exists(ctx, r.keys.KeyStreams())
		paused = p.HGetAll(ctx, r.keys.Paused)
		cancels = p.HGetAll(ctx, r.keys.Cancel)
		return nil
	})
	if n, err := levels.Result(); err == nil {
		r.levels.Store(n > 0)
	}
	if n, err := rings.Result(); err == nil {
		r.keysSeen(n)
	}
	if n, err := streams.Result(); err == nil && n == 0 {
		r.keysListed = true // no key stream: the first replay has none to list
	} else {
		r.keyStreams.Store(true)
	}
	if h, err := paused.Result(); err == nil {
		r.pauseSeen(h)
	}
	if h, err := cancels.Result(); err == nil && len(h) > 0 {
		r.mu.Lock()
		r.cancels = h
		r.mu.Unlock()
	}
}

// work runs jobs until the reader closes the channel. Once draining, or
// while the queue is paused, it starts nothing new: entries read but not
// started go back to the stream. A cancelled job is dead-lettered as such,
// unrun or stopped (its context cancelled with cause ErrCancelled). The
// worker's context is made once and only made again after a cancel, so a
// job costs no context of its own.
func (r *runner) work(ctx context.Context) {
	w := &worker{}
	w.renew(ctx)
	r.mu.Lock()
	r.workers = append(r.workers, w)
	r.mu.Unlock()
	for j := range r.jobs {
		now := time.Now()
		if !r.heldAt(now) {
			r.forget(j.key()) // unstarted and pending: the slot's next holder runs it
			r.finished()
			continue
		}
		if j.cancelled.Load() && !r.cancelWithdrawn(ctx, j) {
			r.results <- result{job: j, dead: ReasonCancelled}
			r.finished()
			continue
		}
		if r.draining() || r.paused.Load() {
			r.results <- result{job: j, back: true}
			r.finished()
			continue
		}
		j.Started = now
		r.st.Recent.Store(j)
		w.mu.Lock()
		w.job = j
		if j.cancelled.Load() { // marked between the check above and now
			w.cancel(ErrCancelled)
		}
		jctx := w.ctx
		w.mu.Unlock()
		j.resultMax, j.noted = r.c.ResultMax, &r.noted
		err := r.checkResult(j, r.handle(r.traced(jctx, j), j))
		w.mu.Lock()
		w.job = nil
		if jctx.Err() != nil && ctx.Err() == nil {
			w.renew(ctx)
		}
		w.mu.Unlock()
		r.st.Recent.CompareAndSwap(j, nil)
		took := time.Since(j.Started)
		r.observe(took)
		switch {
		case j.cancelled.Load():
			// Stopped, or finished while the cancel reached it: either
			// way the cancel wins, once, and a late result changes nothing.
			r.results <- result{job: j, dead: ReasonCancelled, dur: took}
		case errors.Is(err, ErrHandlerDown):
			// Not the job's fault: it goes back unrun, and the holder leaves.
			r.stop("handler", err)
			r.results <- result{job: j, back: true}
		case errors.Is(err, errUnstarted):
			r.results <- result{job: j, back: true}
		case err != nil && ctx.Err() != nil:
			// Cut short by the end of the grace period: leave it pending for
			// the slot's next holder, which replays it at once.
			r.traceInterrupted(j, err)
			r.forget(j.key())
		default:
			r.results <- result{job: j, err: err, dur: took}
		}
		r.finished()
	}
}

// worker is one worker goroutine's job and context, for the keeper to
// cancel the job it runs.
type worker struct {
	mu     sync.Mutex
	job    *Job                    // running now, or nil; guarded by mu
	ctx    context.Context         // the jobs' context until a cancel; written under mu by the worker
	cancel context.CancelCauseFunc // cancels ctx; guarded by mu
}

// renew makes the worker's context again, under parent; the caller holds
// mu or owns w alone.
func (w *worker) renew(parent context.Context) {
	w.ctx, w.cancel = context.WithCancelCause(parent)
}

// ownsTimeouts is a Handler that enforces job timeouts itself (Exec:
// SIGTERM, then SIGKILL after a grace), so the runner does not cancel its
// context at the timeout.
type ownsTimeouts interface{ ownsTimeouts() }

// handle runs the handler, turning a panic into a job error, under the job
// timeout when there is one.
func (r *runner) handle(ctx context.Context, j *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panic: %v", p)
			r.c.Logger.Error().Str("job", j.ID).Interface("panic", p).Str("stack", string(debug.Stack())).Msg("handler panicked")
		}
	}()
	timeout := r.c.JobTimeout
	if j.Timeout > 0 {
		timeout = j.Timeout
	}
	if _, own := r.c.Handler.(ownsTimeouts); own {
		return r.c.Handler.Handle(ctx, j)
	}
	ctx = withJob(ctx, j) // for SetResult and Progress
	if timeout <= 0 {
		return r.c.Handler.Handle(ctx, j)
	}
	jctx, cancel := context.WithTimeoutCause(ctx, timeout, ErrJobTimeout)
	defer cancel()
	err = r.c.Handler.Handle(jctx, j)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(jctx), ErrJobTimeout) {
		return fmt.Errorf("%w after %s: %w", ErrJobTimeout, timeout, err)
	}
	return err
}

func (r *runner) finished() {
	n := r.inflight.Add(-1)
	if r.refill(r.window() - n) { // else the reader would go back to sleep
		r.poke()
	}
}

// poke tells the reader that the window may have room.
func (r *runner) poke() {
	select {
	case r.space <- struct{}{}:
	default:
	}
}

// observe keeps a moving mean of handler time (a racy update is harmless).
func (r *runner) observe(d time.Duration) {
	old := r.meanNS.Load()
	r.meanNS.Store(old + (int64(d)-old)/8)
}

// refill says whether the reader reads now, with free places in the window:
// at once when jobs are slow or the workers are about to run dry, otherwise
// once half the window is free, so that jobs faster than a read cost one
// read per half batch rather than one per job.
func (r *runner) refill(free int64) bool {
	w := r.window()
	return w <= int64(r.c.Concurrency+1) || r.inflight.Load() <= int64(r.c.Concurrency) || free >= w/2
}

// window is how many jobs may be read and unfinished at once: when jobs are
// slow, one per worker and one read ahead (so a worker never waits for a
// read, and other holders get the rest); when fast, a whole batch (so reads
// are few).
func (r *runner) window() int64 {
	if time.Duration(r.meanNS.Load()) < time.Millisecond {
		return int64(max(r.c.Batch, r.c.Concurrency+1))
	}
	return int64(r.c.Concurrency + 1)
}
