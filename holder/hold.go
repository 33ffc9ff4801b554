package holder

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-run/baton/history"
	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/internal/cronfire"
	"github.com/baton-run/baton/internal/proc"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/periodic"
	"github.com/baton-run/baton/work"
)

// envFence gives jobs their holder's fencing token (lock_backend redis).
const envFence = "BATON_FENCE"

// JobEnv is what a holder adds to its jobs' environment (exec jobs and
// persistent children; work.Exec.Env): BATON_HOST, the configured host, and
// with a lease, BATON_FENCE, its fencing token (fence > 0). The handlers add
// each job's own (BATON_JOB_ID, BATON_SLOT, BATON_HOLDER...: work/kin.go);
// a Go handler reads the fence from work.Job.Fence.
func JobEnv(host string, fence int64) []string {
	env := []string{config.EnvHost + "=" + host}
	if fence > 0 {
		env = append(env, envFence+"="+strconv.FormatInt(fence, 10))
	}
	return env
}

// Hold works the queue on slot until the lifetime ends, ctx is cancelled
// (the first signal: drain), max_jobs is reached or the scaler leaves, then
// releases slot. It returns nil on a normal leave.
//
// The components start in this order, each once the one before it is in
// place, and stop in the reverse order:
//
//  1. the slot record, with the hard deadline: before anything can hang,
//     others can prove this holder overdue (refused when it cannot be
//     written anywhere: UnhealableError);
//  2. the Redis client (Hooks.Connect; kept from Stand);
//  3. the hard deadline timer (a clock timer: kill the jobs, record the
//     leave, Hooks.Exit) and the lifetime timer (stop reading);
//  4. the lost-slot watch (a goroutine: kill the jobs, Hooks.Exit);
//  5. the handler (exec or persistent unless given), the child subreaper,
//     and the previous holder's leftovers killed;
//  6. the publisher (a goroutine; it runs the scaler's step too);
//  7. the slot history (the take, then its watch goroutine);
//  8. the metrics file writer and the per-minute sampler (goroutines);
//  9. the periodic ticks (periodic.Start's goroutine: it claims the
//     [[periodic]] entries' due ticks once a second, fenced by the lease)
//     and the cron firings' publisher (cronfire.Start's goroutine);
//  10. the job loop, work.Run, in Hold's goroutine.
//
// Once work.Run returns: the publisher and the history watch stop, the
// cron firings' publisher and the periodic ticks stop, the sampler and the
// metrics writer stop, persistent children get their stop
// message, the orphans are killed, the leave is recorded, the lost-slot
// watch and the timers stop, the slot is released, and the metrics file is
// written once more without it.
func (h *Holder) Hold(ctx context.Context, slot lock.Slot) error {
	defer slot.Release()
	err := h.hold(ctx, slot)
	if h.cfg.MetricsFile != "" {
		// Once more with the slot freed: the file outlives the holder, and
		// when it was the last one, a file that still counted it would
		// hide "no holder while jobs wait" from the alerts.
		_ = slot.Release()
		h.writeMetricsOnce()
	}
	return err
}

func (h *Holder) hold(ctx context.Context, slot lock.Slot) error {
	cfg, clk := h.cfg, h.clk
	h.log = h.log.With().Str("slot", slot.Name()).Str("role", lock.RoleRun).Logger()
	h.setName("baton:run:" + strconv.Itoa(slot.Index()))
	since := clk.Now()
	until := since.Add(Lifetime(cfg, rand.Float64()))
	// The hard deadline: hung handler code cannot be stopped, the process
	// can. A frozen process cannot stop itself: others kill it past the
	// deadline in its record (standby.HealMargin).
	deadline := until.Add(cfg.ShutdownGrace.D() + HardMargin)
	// 1. The record. The token proves which processes are this tenure's:
	// its jobs carry it.
	token := proc.NewToken()
	rec := h.record(lock.RoleRun, since, until)
	rec.Token = token
	rec.Deadline, rec.BootDeadline = deadline, lock.BootClock()+deadline.Sub(since)
	if err := refuseUnhealable(slot.Publish(rec), slot, cfg.LockDir); err != nil {
		return err
	}
	// 2. Redis. Told to stop while connecting: a drain with nothing to
	// drain, not a failure.
	if err := h.connect(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// 3. The timers. Their goroutines are the clock's; Hold stops them.
	hard := clk.AfterFunc(deadline.Sub(clk.Now()), func() {
		h.log.Error().Msg("hard deadline: jobs still running after lifetime + shutdown_grace; killing them and exiting")
		h.Abort(history.WhyError)
		h.o.Hooks.Exit(ErrHardDeadline)
	})
	defer hard.Stop()
	sig := ctx // done when told to stop
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// At the end of the lifetime reading stops (work.Run drains); unless a
	// signal or the scaler stopped it first.
	var lifeOver atomic.Bool
	life := clk.AfterFunc(until.Sub(clk.Now()), func() {
		if ctx.Err() == nil {
			lifeOver.Store(true)
			cancel()
		}
	})
	defer life.Stop()

	// 4. The lost-slot watch.
	stopLost := h.watchLost(slot)
	defer stopLost()

	// 5. The handler, its jobs' environment given explicitly.
	fenceKey, fence := Fence(slot)
	handler, persist, kids := h.handler(token, JobEnv(h.host, fence))
	h.mu.Lock()
	h.kids = kids
	h.mu.Unlock()
	// The leave is recorded in the slot history last, once the children
	// are stopped and the orphans killed, just before the slot is released
	// (Hold): a persistent child that ignores its stop message keeps the
	// slot held for up to shutdown_grace, and no standby can take it
	// meanwhile. Recorded when work.Run returned, that time counted as the
	// slot free (time below k, the next holder's gap) while it was held.
	var leave func()
	defer func() {
		if leave != nil {
			leave()
		}
	}()
	if kids != nil && h.o.OwnsProcess {
		h.adopt()
		defer h.killOrphans()
	}
	if persist != nil {
		// Once the jobs are done each child gets the stop message; all must
		// be gone before the hard deadline.
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), deadline.Add(-HardMargin/2).Sub(clk.Now()))
			defer cancel()
			_ = persist.Close(ctx)
		}()
	}
	if x, ok := handler.(*work.Exec); ok {
		defer x.Close() // its jobs' result files' directory
	}
	if prev := slot.Inherited(); prev != nil {
		h.killLeftovers(prev)
	}

	// 6. The publisher, and the scaler in its goroutine.
	st := new(work.Stats)
	var step func(*Activity)
	sc := h.newScaler(slot, st, until, sig, cancel)
	if sc != nil {
		step = sc.step
	}
	var children func() []Child
	if persist != nil {
		children = func() []Child { return recordChildren(persist.Children()) }
	}
	stopPublish := sync.OnceFunc(h.publish(slot, rec, st, children, step))
	defer stopPublish() // on an early return; the normal one stops it below

	// 7. The slot history.
	h.took(slot)
	h.mu.Lock()
	h.leave = func(why string) { h.left(slot, why, st.Done.Load(), 500*time.Millisecond) }
	h.mu.Unlock()
	stopWatch := sync.OnceFunc(h.watchSlots(slot.Name(), st.Dead.Load))
	defer stopWatch()

	// 8. The metrics file and the samples.
	stopMetrics := h.writeMetrics()
	defer stopMetrics()
	stopSampling := h.sample()
	defer stopSampling()

	// 9. The periodic ticks and the cron firings.
	wcfg := h.workConfig(slot.Index(), until, handler, fenceKey, fence)
	if hs, ok := slot.(lock.Holding); ok && wcfg.Fence != nil {
		// Reads and starts are fenced by the lease's own clock too: a
		// holder resumed past its lease starts nothing (docs/fleet.md).
		wcfg.Fence.Held = hs
	}
	stopTicks, err := h.startTicks(wcfg.Fence)
	if err != nil {
		return err
	}
	defer stopTicks()

	// 10. The job loop.
	h.log.Info().Time("until", until).Msg("holding run slot")
	err = work.Run(ctx, wcfg, st)
	stopPublish()
	stopWatch()
	why := leftWhy(err, sig, lifeOver.Load() || err == nil && !clk.Now().Before(until))
	if why == history.WhyMaxJobs && sc != nil && sc.left { // read after stopPublish: no step runs now
		why = history.WhyIdle
	}
	leave = func() { h.left(slot, why, st.Done.Load(), 2*time.Second) }
	h.mu.Lock()
	h.leave = nil // recorded here now: a late Abort records no second leave
	h.mu.Unlock()
	h.log.Info().Int64("jobs_done", st.Done.Load()).Int64("jobs_failed", st.Failed.Load()).Int64("jobs_dead", st.Dead.Load()).Msg("leaving run slot")
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// startTicks starts the periodic ticks (periodic.Start: claims of the
// [[periodic]] entries' due ticks, fenced by the lease) and the cron
// firings' publisher (cronfire.Start), each in its own goroutine; stop
// stops the publisher, then the ticks, and waits for both.
func (h *Holder) startTicks(fence *work.Fence) (stop func(), err error) {
	cfg := h.cfg
	entries, _ := cfg.PeriodicEntries() // checked by Load
	stopPeriodic, err := periodic.Start(periodic.Config{Client: h.rdb, Queue: cfg.Queue, Host: h.host, Entries: entries, Fence: fence, Logger: h.log})
	if err != nil {
		return nil, err
	}
	stopFirings := cronfire.Start(h.rdb, cfg.LockDir, cfg.Queue, h.host, h.log)
	return func() { stopFirings(); stopPeriodic() }, nil
}

// Lifetime is a holder's lifetime L = lifetime + r·jitter, r in [0, 1).
func Lifetime(cfg *config.Config, r float64) time.Duration {
	return cfg.Lifetime.D() + time.Duration(r*float64(cfg.Jitter.D()))
}

// handler is the job handler: the given one, or the exec or persistent
// handler of Argv, whose jobs get env (JobEnv) and token as BATON_HOLDER;
// persist is the persistent one, kids the one that starts processes.
func (h *Holder) handler(token string, env []string) (handler work.Handler, persist *work.Persistent, kids killer) {
	cfg := h.cfg
	switch {
	case h.o.Handler != nil:
		return h.o.Handler, nil, nil
	case cfg.Persistent:
		persist = &work.Persistent{Argv: h.o.Argv, Timeout: cfg.JobTimeout.D(), HeartbeatTimeout: cfg.HeartbeatTimeout.D(),
			MaxJobsPerChild: cfg.MaxJobsPerChild, MaxRSS: int64(cfg.MaxChildRSS), Grace: grace(cfg),
			Logger: h.log, Holder: token, Env: env}
		return persist, persist, persist
	}
	x := &work.Exec{Argv: h.o.Argv, Timeout: cfg.JobTimeout.D(), RejectExitCodes: cfg.RejectExitCodes,
		Grace: grace(cfg), Logger: h.log, Holder: token, Env: env}
	return x, nil, x
}

// workConfig is the job loop's config on run slot i until the end of the
// lifetime (on the holder's clock), with the lease's fence (key "": none).
func (h *Holder) workConfig(i int, until time.Time, handler work.Handler, fenceKey string, fence int64) work.Config {
	cfg := h.cfg
	rate, _ := work.ParseRate(cfg.RateLimit) // validated by Load
	var fenceCfg *work.Fence
	if fenceKey != "" {
		fenceCfg = &work.Fence{Key: fenceKey, Token: fence}
	}
	return work.Config{
		Client: h.rdb, Queue: cfg.Queue, Consumer: Consumer(cfg, i), Handler: handler,
		// work.Run's own timer is on the wall clock; the lifetime timer
		// (on the holder's) stops it too.
		Deadline:    time.Now().Add(until.Sub(h.clk.Now())),
		Concurrency: cfg.Concurrency, Grace: grace(cfg), JobTimeout: cfg.JobTimeout.D(),
		MaxJobs: cfg.MaxJobs, RedisDownExit: cfg.RedisDownExit.D(),
		MaxAttempts: cfg.MaxAttempts, RetryBackoff: cfg.RetryBackoff.D(), RetryBackoffMax: cfg.RetryBackoffMax.D(),
		DeadMax: cfg.DeadMax, Retention: cfg.Retention.D(), RetentionMax: cfg.RetentionMax, MaxPayload: cfg.MaxPayload, VisibilityTimeout: cfg.VisibilityTimeout.D(),
		ResultMax: cfg.ResultMax,
		RateLimit: rate, Fence: fenceCfg, TracerProvider: h.o.TracerProvider, KeyCaps: cfg.KeyCaps(),
		Logger: h.log,
	}
}

// sample takes the per-minute samples of the queue's totals, for baton
// web's charts (work.StartSampling, whose goroutine stop stops).
func (h *Holder) sample() (stop func()) {
	warned := false
	return work.StartSampling(h.rdb, h.cfg.Queue, func(err error) {
		if !warned {
			h.log.Warn().Err(err).Msg("cannot sample the queue's totals (baton web's charts); retrying")
		}
		warned = true
	})
}

// watchLost watches slot in a goroutine that stop ends, and stop waits
// for. Lost: another process holds the slot now and, being its consumer,
// replays its pending entries; running them here too would run them twice
// at once. Everything stops now; they stay pending. It watches until the
// holder leaves, through a drain too: a lease that cannot be renewed while
// jobs drain for shutdown_grace expires, and its next holder replays them.
func (h *Holder) watchLost(slot lock.Slot) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.lost(ctx, slot)
	}()
	return func() { cancel(); <-done }
}

func (h *Holder) lost(ctx context.Context, slot lock.Slot) {
	select {
	case <-slot.Lost():
	case <-ctx.Done():
		return
	}
	h.log.Error().Msg("slot lost (" + slot.LostReason() + "): killing jobs and leaving at once; they stay pending for the slot's next holder")
	h.killAll()
	h.o.Hooks.Exit(ErrSlotLost)
}

// leftWhy says why a holder left: err is work.Run's, sig ends on a signal,
// over says the lifetime had ended.
func leftWhy(err error, sig context.Context, over bool) string {
	switch {
	case sig.Err() != nil:
		return history.WhyStopped
	case err != nil && !errors.Is(err, context.Canceled):
		return history.WhyError
	case over:
		return history.WhyLifetime
	}
	return history.WhyMaxJobs // or idle above min_slots: the caller knows
}
