package work

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// Config is one holder's job loop.
type Config struct {
	Client   *redis.Client
	Queue    string
	Consumer string // the slot's identity, e.g. "host/run-2"
	Handler  Handler

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
	Logger        zerolog.Logger
}

// ErrRedisDown is returned when Redis kept failing for RedisDownExit.
var ErrRedisDown = errors.New("redis unavailable")

func (c *Config) defaults() {
	if c.Concurrency < 1 {
		c.Concurrency = 1
	}
	if c.Grace <= 0 {
		c.Grace = 30 * time.Second
	}
	if c.Batch < 1 {
		c.Batch = 128
	}
	if c.Block <= 0 {
		c.Block = time.Second
	}
	if c.RedisDownExit <= 0 {
		c.RedisDownExit = 30 * time.Second
	}
}

// Stats is a running holder's progress; safe to read from any goroutine.
type Stats struct {
	Done   atomic.Int64        // jobs finished successfully
	Failed atomic.Int64        // jobs whose handler returned an error
	Recent atomic.Pointer[Job] // the most recently started job still running, or nil
}

// Run drains the queue until the deadline, MaxJobs, or ctx is done, then lets
// in-flight jobs finish within Grace and acknowledges them. Entries read but
// not started stay pending for the slot's next holder. It returns nil when it
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
	}
	// Assume slow jobs until measured otherwise: read one per worker at first.
	r.meanNS.Store(int64(time.Second))
	return r.run(ctx)
}

type result struct {
	job *Job
	err error
}

// runner's goroutines: one reader (owns jobs and closes it), Concurrency
// workers (send on results), one acker (reads results until closed by run).
type runner struct {
	c       Config
	st      *Stats
	keys    Keys
	jobs    chan *Job
	results chan result
	space   chan struct{} // a worker finished: the reader may read more

	inflight atomic.Int64 // read and not yet finished
	meanNS   atomic.Int64 // moving mean of handler time, for the read window

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
	if err := EnsureGroup(ctx, r.c.Client, r.keys); err != nil {
		return fmt.Errorf("create consumer group: %w", err)
	}
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
		r.ack()
	}()
	reader.Add(1)
	go func() {
		defer reader.Done()
		defer close(r.jobs)
		r.read(ctx)
	}()

	<-r.stopped
	log.Debug().Str("reason", r.why).Msg("stopped reading; finishing in-flight jobs")
	graceEnd := time.AfterFunc(r.c.Grace, func() {
		log.Warn().Dur("shutdown_grace", r.c.Grace).Msg("grace period over: cancelling in-flight jobs")
		cancelHandlers()
	})
	reader.Wait()
	workers.Wait()
	graceEnd.Stop()
	close(r.results)
	<-ackDone
	if r.fatal != nil {
		return r.fatal
	}
	if r.why == "signal" {
		return ctx.Err()
	}
	return nil
}

// work runs jobs until the reader closes the channel. Jobs already read still
// run while draining (the read window keeps them few when jobs are slow); once
// the grace period is over nothing new starts, and those entries stay pending
// for the slot's next holder.
func (r *runner) work(ctx context.Context) {
	for j := range r.jobs {
		if ctx.Err() != nil {
			r.finished()
			continue
		}
		j.Started = time.Now()
		r.st.Recent.Store(j)
		err := r.handle(ctx, j)
		r.st.Recent.CompareAndSwap(j, nil)
		r.observe(time.Since(j.Started))
		r.results <- result{j, err}
		r.finished()
	}
}

// handle runs the handler, turning a panic into a job error.
func (r *runner) handle(ctx context.Context, j *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panic: %v", p)
			r.c.Logger.Error().Str("job", j.ID).Interface("panic", p).Stack().Msg("handler panicked")
		}
	}()
	return r.c.Handler.Handle(ctx, j)
}

func (r *runner) finished() {
	r.inflight.Add(-1)
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

// window is how many jobs may be read and unfinished at once: just enough to
// keep the workers busy when jobs are slow (so other holders get the rest),
// a whole batch when jobs are fast (so reads are few).
func (r *runner) window() int64 {
	if time.Duration(r.meanNS.Load()) < time.Millisecond {
		return int64(max(r.c.Batch, r.c.Concurrency))
	}
	return int64(r.c.Concurrency)
}

// read replays this consumer's pending entries, then reads new ones.
func (r *runner) read(ctx context.Context) {
	limit := int64(-1)
	if r.c.MaxJobs > 0 {
		limit = int64(float64(r.c.MaxJobs) * (0.9 + 0.2*rand.Float64()))
		limit = max(limit, 1)
	}
	var count int64
	replaying, after := true, "0"
	var down time.Time // first failure of the current Redis outage
	backoff := 50 * time.Millisecond
	for !r.draining() {
		free := r.window() - r.inflight.Load()
		if limit > 0 {
			free = min(free, limit-count)
		}
		if free <= 0 {
			select {
			case <-r.space:
				continue
			case <-r.stopped:
				return
			}
		}
		var jobs []*Job
		var err error
		if replaying {
			jobs, err = r.readPending(ctx, after, free)
			if err == nil && len(jobs) == 0 {
				replaying = false
				continue
			}
		} else {
			jobs, err = r.readNew(ctx, free)
		}
		if err != nil {
			if isNoGroup(err) {
				err = EnsureGroup(ctx, r.c.Client, r.keys)
			}
			if err != nil {
				if down.IsZero() {
					down = time.Now()
					r.c.Logger.Warn().Err(err).Msg("redis read failed; retrying")
				}
				if time.Since(down) > r.c.RedisDownExit {
					r.stop("redis", fmt.Errorf("%w for %s: %v", ErrRedisDown, r.c.RedisDownExit, err))
					return
				}
				select {
				case <-time.After(backoff):
				case <-r.stopped:
					return
				}
				backoff = min(backoff*2, 2*time.Second)
			}
			continue
		}
		if !down.IsZero() {
			r.c.Logger.Info().Dur("down", time.Since(down)).Msg("redis reachable again")
			down, backoff = time.Time{}, 50*time.Millisecond
		}
		if replaying && len(jobs) > 0 {
			after = jobs[len(jobs)-1].ID
		}
		for _, j := range jobs {
			if j.Payload == nil { // deleted while pending: a ghost
				r.inflight.Add(1)
				r.results <- result{j, nil}
				r.finished()
				continue
			}
			r.inflight.Add(1)
			count++
			r.jobs <- j
		}
		if limit > 0 && count >= limit {
			r.stop("max_jobs", nil)
			return
		}
	}
}

// readNew reads entries never delivered, blocking up to Block (or the deadline).
func (r *runner) readNew(ctx context.Context, n int64) ([]*Job, error) {
	block := r.c.Block
	if !r.c.Deadline.IsZero() {
		block = min(block, max(time.Until(r.c.Deadline), time.Millisecond))
	}
	res, err := r.c.Client.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: Group, Consumer: r.c.Consumer, Streams: []string{r.keys.Stream, ">"},
		Count: n, Block: block,
	}).Result()
	if isRedisNil(err) || (err != nil && ctx.Err() != nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return r.toJobs(res, nil), nil
}

// readPending reads this consumer's own pending entries after id `after`.
// On Redis ≥ 7.0 this read counts as a delivery, and the delivery count is
// the attempt number: a job that kills its holder every time is counted.
func (r *runner) readPending(ctx context.Context, after string, n int64) ([]*Job, error) {
	res, err := r.c.Client.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: Group, Consumer: r.c.Consumer, Streams: []string{r.keys.Stream, after},
		Count: n, Block: -1,
	}).Result()
	if isRedisNil(err) {
		return nil, nil
	}
	if err != nil || len(res) == 0 || len(res[0].Messages) == 0 {
		return nil, err
	}
	msgs := res[0].Messages
	pend, err := r.c.Client.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: r.keys.Stream, Group: Group, Consumer: r.c.Consumer,
		Start: msgs[0].ID, End: msgs[len(msgs)-1].ID, Count: int64(len(msgs)),
	}).Result()
	if err != nil {
		return nil, err
	}
	attempts := make(map[string]int, len(pend))
	for _, p := range pend {
		attempts[p.ID] = int(p.RetryCount)
	}
	return r.toJobs(res, attempts), nil
}

// toJobs turns stream messages into jobs; a deleted entry gets a nil payload.
func (r *runner) toJobs(res []redis.XStream, attempts map[string]int) []*Job {
	if len(res) == 0 {
		return nil
	}
	jobs := make([]*Job, 0, len(res[0].Messages))
	for _, m := range res[0].Messages {
		j := &Job{ID: m.ID, Queue: r.c.Queue, Slot: r.c.Consumer, Attempt: 1}
		if a, ok := attempts[m.ID]; ok {
			j.Attempt = max(a, 1)
		}
		if m.Values != nil {
			p, _ := m.Values[PayloadField].(string)
			j.Payload = []byte(p)
		}
		jobs = append(jobs, j)
	}
	return jobs
}

// ack acknowledges finished jobs in batches: it takes what is waiting and sends
// one script call, so a busy holder makes few round trips and an idle one acks
// at once. A failed ack is retried; the entry stays pending meanwhile.
func (r *runner) ack() {
	log := r.c.Logger
	ids := make([]any, 0, 256)
	flush := func() {
		if len(ids) == 0 {
			return
		}
		backoff := 50 * time.Millisecond
		for start := time.Now(); ; {
			err := ackScript.Run(context.Background(), r.c.Client, []string{r.keys.Stream, r.keys.Stats}, append([]any{Group}, ids...)...).Err()
			if err == nil {
				break
			}
			if time.Since(start) > r.c.RedisDownExit {
				log.Error().Err(err).Int("jobs", len(ids)).Msg("ack failed; jobs stay pending and will run again")
				break
			}
			time.Sleep(backoff)
			backoff = min(backoff*2, 2*time.Second)
		}
		ids = ids[:0]
	}
	for res := range r.results {
		r.record(res)
		if res.err == nil {
			ids = append(ids, res.job.ID)
		}
	more:
		for len(ids) < cap(ids) {
			select {
			case res, ok := <-r.results:
				if !ok {
					break more
				}
				r.record(res)
				if res.err == nil {
					ids = append(ids, res.job.ID)
				}
			default:
				break more
			}
		}
		flush()
	}
	flush()
}

func (r *runner) record(res result) {
	if res.job.Payload == nil && res.err == nil {
		return // a ghost: nothing ran
	}
	if res.err == nil {
		r.st.Done.Add(1)
		return
	}
	r.st.Failed.Add(1)
	r.c.Logger.Warn().Str("job", res.job.ID).Int("attempt", res.job.Attempt).Err(res.err).
		Msg("job failed; left pending for this slot's next holder")
}
