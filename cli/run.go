package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/baton-run/baton/history"
	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/internal/cronfire"
	"github.com/baton-run/baton/internal/proc"
	"github.com/baton-run/baton/internal/rediserr"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/metrics"
	"github.com/baton-run/baton/periodic"
	"github.com/baton-run/baton/standby"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/spf13/pflag"
)

const runUsage = `Usage: baton run [flags] -- CMD [ARGS...]

Take a run slot, or else a standby slot, and drain the queue until the
lifetime ends. Meant to be started by cron every minute: a start that finds
every slot taken exits 0 at once, without connecting to Redis.

Each job runs CMD once, with the payload on stdin (never in argv) and
BATON_JOB_ID, BATON_ATTEMPT, BATON_QUEUE, BATON_SLOT, BATON_HOLDER (the
holder's random token), BATON_RUN and BATON_HOST in the environment, and,
with lock_backend redis, BATON_FENCE (the lease's fencing token), but not
BATON_REDIS_URL. Exit 0 marks the job done. Any other exit is retried with
backoff (retry_backoff, doubling, up to retry_backoff_max) until
max_attempts runs, then dead-lettered ('baton dead'); an exit status in
reject_exit_codes (default 65) dead-letters it at once. A job cut short by a
kill -9 of its holder runs again in the slot's next holder. CMD runs in its
own process group and dies with its holder; what it leaves running, daemons
included, is killed when it ends.

With --persistent, each of the concurrency lanes starts CMD once and feeds
it one job at a time over the worker protocol (fds 3 and 4; see
docs/workers.md, and examples/python, examples/node for helpers). A child
is killed and replaced on job_timeout, on heartbeat_timeout of silence,
after about max_jobs_per_child jobs, and past max_child_rss; one that
cannot start makes the holder exit 1, leaving the jobs queued.

With min_slots below slots, cron and the standbys keep min_slots holders
(k) and the slots above are for bursts: a holder that sees a backlog
(scale_up_backlog waiting jobs per holder, or a job waiting scale_up_age)
starts candidates for the free run slots, and a holder above the kept slots
leaves after idle_exit without a job (docs/scaling.md).

With lock_backend redis the slots are leases shared by every host of the
queue (docs/fleet.md): slots counts fleet-wide, and a holder that cannot
renew its lease kills its jobs and exits 1 before the lease expires.

Periodic jobs: every holder also enqueues the config's [[periodic]]
entries (name, schedule, payload; priority, timeout, max_attempts,
catch_up, catch_up_max, overlap = allow or skip), each tick exactly once
across all holders and hosts, claimed in Redis on Redis' clock
(docs/periodic.md; 'baton periodic' lists them). Their jobs also get
BATON_TICK (the scheduled time, RFC 3339) and BATON_PERIODIC (the entry's
name). A bad entry exits 2 before any slot is taken.

Every flag is also a config key (--shutdown-grace is shutdown_grace); flags
win over the file, BATON_REDIS_URL over the file's redis_url.

{{flags}}
Signals: SIGTERM or SIGINT drains (in-flight jobs finish within
shutdown_grace, exit 0); a second one exits at once. SIGHUP is ignored.

Example:
  # crontab -e: 4 workers with 4 standbys, 5-6 minute lifetimes
  # (cron's PATH is /usr/bin:/bin: name baton by its full path; a holder
  # logs at info, so send stderr to a file or pass --log-level warn, or
  # cron mails every few minutes)
  * * * * * /usr/local/bin/baton run --log-level warn --config /etc/baton/thumbs.toml -- /usr/local/bin/make-thumbnail
  # Python code in 4 long-lived children (examples/python/baton_worker.py)
  * * * * * /usr/local/bin/baton run --log-level warn --config /etc/baton/thumbs.toml --persistent --concurrency 4 -- /usr/bin/python3 /srv/app/worker.py
  # a job every night at 02:30 Berlin time, enqueued by whichever holder
  # runs then; in /etc/baton/thumbs.toml:
  #   [[periodic]]
  #   name = "nightly-cleanup"
  #   schedule = "CRON_TZ=Europe/Berlin 30 2 * * *"
  #   payload = "cleanup"
  # 1 holder kept, up to 4 while a backlog lasts
  * * * * * /usr/local/bin/baton run --log-level warn --config /etc/baton/thumbs.toml --slots 4 --min-slots 1 -- /usr/local/bin/make-thumbnail
`

// envSpawned marks a candidate started by another candidate: it spawns no more.
const envSpawned = "BATON_SPAWNED"

// hardMargin is the slack after lifetime + shutdown_grace before the process
// leaves whatever its handlers do.
const hardMargin = 2 * time.Second

// runFlags builds run's flag set: every config key.
func runFlags() (*pflag.FlagSet, *config.Flags) {
	fs := flagSet("run")
	return fs, config.Bind(fs, config.All)
}

func runRun(ctx context.Context, e *env, args []string) error {
	// A holder's log is not part of its jobs' fate: a dead log reader
	// loses lines, never a holder mid-job.
	surviveBrokenLog()
	fs, cf := runFlags()
	if err := parse(e, fs, runUsage, args); err != nil {
		return err
	}
	argv := fs.Args()
	switch {
	case e.Handler == nil && len(argv) == 0:
		return usagef("put the command after --, e.g. baton run --config F -- /usr/local/bin/job", "run: no command to run for each job")
	case e.Handler != nil && len(argv) > 0:
		return usagef("remove the command after --", "run: this program handles jobs itself; it takes no command")
	}
	cfg, err := cf.Load(e.Getenv)
	if err != nil {
		return err
	}
	if cfg.Persistent && e.Handler != nil {
		return usagef("remove persistent from the config", "run: persistent: this program handles jobs itself; it starts no children")
	}
	if err := lock.CheckDir(cfg.LockDir); err != nil {
		return err
	}
	log := newLogger(e.Stderr, cfg)
	if cfg.LockBackend == "redis" {
		log = log.With().Str("host", cfg.Host).Logger()
	}
	if cfg.Spawn > 1 && e.Getenv(envSpawned) == "" {
		spawn(log, cfg.Spawn-1)
	}
	// Cron fired: status notices when the firings stop. One syscall, no
	// Redis; the first candidate makes the lock dir, and marks after Enter.
	fired := e.Getenv(envSpawned) == "" && e.Getenv(envScale) == ""
	marked := fired && cronfire.Mark(cfg.LockDir, cfg.Queue)
	if permit, ok, err := hostCap(cfg); err != nil || !ok {
		if err == nil {
			log.Debug().Int("max_per_host", cfg.MaxPerHost).Msg("this host holds max_per_host slots: nothing to do")
		}
		return err
	} else if permit != nil {
		defer permit.Release()
	}
	runSet, sbSet, err := slotSets(cfg)
	if err == nil {
		err = refuseShared(cfg, runSet, sbSet)
	}
	switch {
	case err != nil:
		return err
	case e.Getenv(envScale) != "":
		sbSet = nil // started to scale up: a free run slot or nothing
	case cfg.MinSlots < cfg.Slots:
		// cron's candidates and the standbys keep the k lowest slots (of
		// the fleet, with leases) covered; scaling up fills the slots above
		if runSet, err = lock.Lowest(runSet, cfg.MinSlots); err != nil {
			return err
		}
	}
	p := &standby.Protocol{Run: runSet, Poll: cfg.PollInterval.D(), Wait: cfg.StandbyWait.D(), Healed: func(r lock.Record, n int) {
		log.Warn().Int("pid", r.PID).Str("slot", r.Role+"-"+strconv.Itoa(r.Slot)).Time("deadline", r.Deadline).Int("processes", n).
			Msg("killed an overdue holder (past its hard deadline: frozen or stuck)")
	}}
	if sbSet != nil {
		p.Standby = sbSet
	}
	role, slot, err := p.Enter()
	if fired && !marked {
		cronfire.Mark(cfg.LockDir, cfg.Queue)
	}
	if mis := (*lock.ConfigMismatchError)(nil); errors.As(err, &mis) {
		return usagef("use the same value on every host; a new value is accepted once no lease granted under the old one is left (docs/fleet.md)", "%s", mis)
	}
	if err != nil {
		if cfg.LockBackend == "redis" {
			if msg, _ := rediserr.Explain(err, strings.HasPrefix(cfg.RedisURL, "rediss://")); msg != "" {
				return redisError(cfg, err) // the leases are in Redis: name it, with a hint
			}
		}
		return fmt.Errorf("take a slot: %w", err)
	}
	if role == standby.None {
		if fired && cfg.LockBackend == "redis" {
			// A fleet's losing candidate talked to Redis already: it
			// publishes its host's firing, so that a host holding no slot
			// does not look silent. (With flock slots it stays offline.)
			publishFiring(ctx, cfg, log)
		}
		log.Debug().Msg("every run and standby slot is taken: nothing to do")
		return nil
	}
	h := &holder{e: e, cfg: cfg, log: log, argv: argv, host: cfg.Host}
	return h.serve(ctx, p, role, slot)
}

// publishFiring publishes this host's cron firing now, on a lean client,
// within a second; a failure is logged at debug only (the next firing
// tries again).
func publishFiring(ctx context.Context, cfg *config.Config, log zerolog.Logger) {
	c, err := newClient(cfg, clientOpts{pool: 1, dial: 500 * time.Millisecond, io: 500 * time.Millisecond, lean: true})
	if err != nil {
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := cronfire.Publish(ctx, c, cfg.Queue, cfg.Host, time.Now()); err != nil {
		log.Debug().Err(err).Msg("cannot publish cron's firing")
	}
}

// spawn starts n more candidates with our arguments and env added to our
// environment, detached, so one crontab line can feed several slots. It
// returns how many started.
func spawn(log zerolog.Logger, n int, env ...string) int {
	self, err := os.Executable()
	if err != nil {
		log.Warn().Err(err).Msg("spawn: cannot find own executable")
		return 0
	}
	argv := append([]string{self}, os.Args[1:]...)
	env = append(env, envSpawned+"=1")
	for i := 0; i < n; i++ {
		if err := proc.SpawnDetached(argv, env...); err != nil {
			log.Warn().Err(err).Msg("spawn a candidate")
			return i
		}
	}
	return n
}

// holder is one process that won a slot.
type holder struct {
	e    *env
	cfg  *config.Config
	log  zerolog.Logger
	argv []string
	host string
	rdb  redis.UniversalClient
	kids killer // the exec or persistent handler; nil in library mode
	// by is who took the run slot: history.ByStandby once promoted, with
	// freeSince, since when the standby saw the slot free.
	by        string
	freeSince time.Time
	hist      *history.Recorder  // set by connect; nil when it cannot be built
	tookDone  chan struct{}      // closed once took's record is written (or failed)
	leftOnce  sync.Once          // the leave is recorded once, forced exit or not
	mu        sync.Mutex         // guards leave
	leave     func(why string)   // records leaving the run slot held now, for a forced exit; nil before
	collector *metrics.Collector // metrics_file's, built once by metricsCollector
}

// killer is a handler that starts processes: KillAll kills them all.
type killer interface{ KillAll() }

func (h *holder) serve(ctx context.Context, p *standby.Protocol, role standby.Role, slot lock.Slot) error {
	ctx, stopSignals := drainOnSignal(ctx, h.log, func() { h.forcedExit(history.WhyStopped) })
	defer stopSignals()
	defer func() {
		if h.rdb != nil {
			_ = h.rdb.Close()
		}
	}()
	if role == standby.Standby {
		var err error
		if slot, err = h.standBy(ctx, p, slot); err != nil || slot == nil {
			return err
		}
	}
	defer slot.Release()
	err := h.hold(ctx, slot, p.Heal)
	if h.cfg.MetricsFile != "" {
		// Once more with the slot freed: the file outlives the holder, and
		// when it was the last one, a file that still counted it would
		// hide "no holder while jobs wait" from the alerts.
		_ = slot.Release()
		h.writeMetricsOnce()
	}
	return err
}

// standBy connects and checks everything first, so a promotion starts work at
// once, then waits for a run slot. It returns a nil slot when it timed out or
// was told to stop.
func (h *holder) standBy(ctx context.Context, p *standby.Protocol, sb lock.Slot) (lock.Slot, error) {
	log := h.log.With().Str("slot", sb.Name()).Str("role", lock.RoleStandby).Logger()
	_ = proc.SetName("baton:standby")
	now := time.Now()
	if err := sb.Publish(h.record(lock.RoleStandby, now, now.Add(p.Wait))); err != nil {
		log.Warn().Err(err).Msg("publish slot record")
	}
	if err := h.connect(ctx); err != nil {
		_ = sb.Release()
		return nil, err
	}
	defer cronfire.Start(h.rdb, h.cfg.LockDir, h.cfg.Queue, h.host, log)()
	// The wait starts now. Past it a standby leaves; frozen, it is healed
	// like a holder past its hard deadline.
	rec := h.record(lock.RoleStandby, now, time.Now().Add(p.Wait))
	rec.Deadline = rec.Until.Add(standby.StandbyGrace)
	rec.BootDeadline = lock.BootClock() + time.Until(rec.Deadline)
	if err := sb.Publish(rec); err != nil {
		if err := refuseUnhealable(err, sb, h.cfg.LockDir); err != nil {
			_ = sb.Release()
			return nil, err
		}
		log.Warn().Err(err).Msg("publish slot record")
	}
	log.Debug().Dur("standby_wait", p.Wait).Msg("standing by")
	stopWatch := h.watchSlots(sb.Name(), nil)
	p.Took = func(_ int, freeSince time.Time) { h.freeSince = freeSince }
	run, ok, err := p.Promote(ctx, sb)
	stopWatch()
	switch {
	case errors.Is(err, context.Canceled):
		log.Debug().Msg("stopped while standing by")
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("wait for a run slot: %w", err)
	case !ok:
		log.Debug().Msg("standby_wait is over without a free run slot: leaving")
		return nil, nil
	}
	log.Info().Str("run_slot", run.Name()).Msg("promoted")
	h.by = history.ByStandby
	return run, nil
}

func (h *holder) connect(ctx context.Context) error {
	// A few connections dialled ahead: as a holder starts, its reader,
	// settler, sampler and slot history all want one at once, and a
	// promoted standby would dial them inside the hand-over's gap.
	t := poolOpts(h.cfg.Concurrency + 4)
	t.minIdle = 3
	rdb, err := connectWith(ctx, h.cfg, t)
	if err != nil {
		return err
	}
	if err := work.Prepare(ctx, rdb, work.KeysFor(h.cfg.Queue)); err != nil {
		_ = rdb.Close()
		return fmt.Errorf("prepare queue %s on %s: %w", h.cfg.Queue, h.cfg.RedisName(), err)
	}
	h.rdb = rdb
	if run, _, err := slotSets(h.cfg); err == nil {
		h.hist = &history.Recorder{Client: rdb, Queue: h.cfg.Queue, Keep: h.cfg.MinSlots, Run: run, PID: os.Getpid(), Host: h.host}
	}
	return nil
}

// watchSlots records what this process sees of the run slots, and the jobs
// it dead-letters (dead, unless nil), in the queue's slot history
// (history.Recorder.Watch) until the returned func is called.
func (h *holder) watchSlots(slot string, dead func() int64) (stop func()) {
	if h.hist == nil {
		return func() {}
	}
	warned := false
	return h.hist.Watch(slot, dead, func(err error) {
		if !warned {
			h.log.Warn().Err(err).Msg("cannot record the slot history (status's events, time below k); retrying")
		}
		warned = true
	})
}

// took records taking slot in the slot history, in the background: the
// first job need not wait for the round trip. left, recording the leave,
// waits for it.
func (h *holder) took(slot lock.Slot) {
	if h.hist == nil {
		return
	}
	by, free := h.by, time.Duration(-1)
	if by == "" {
		by = history.ByCandidate
	}
	if !h.freeSince.IsZero() {
		free = time.Since(h.freeSince)
	}
	done, i, prev, log := make(chan struct{}), slot.Index(), slot.Inherited(), h.log
	h.tookDone = done
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		gap, known, err := h.hist.Took(ctx, i, by, prev, free)
		switch {
		case err != nil:
			log.Warn().Err(err).Msg("cannot record the take in the slot history")
		case known:
			log.Debug().Dur("gap", gap).Msg("the slot was free for this long")
		}
	}()
}

// left records leaving slot in the slot history, once: the forced exits
// (a second signal, the hard deadline) record it too, within wait, just
// before the process exits and the kernel frees the slot; else the next
// take would count a death.
func (h *holder) left(slot lock.Slot, why string, jobs int64, wait time.Duration) {
	if h.hist == nil {
		return
	}
	h.leftOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if h.tookDone != nil {
			select {
			case <-h.tookDone:
			case <-ctx.Done():
			}
		}
		if err := h.hist.Left(ctx, slot.Index(), why, jobs); err != nil {
			h.log.Warn().Err(err).Msg("cannot record leaving in the slot history")
		}
	})
}

// forcedExit kills the jobs and, when a run slot is held, records leaving
// it (why); the caller exits next. It waits half a second at most, however
// the record fares: a Redis that stopped answering holds a reply for the
// client's read timeout whatever the context says, and a normal leave in
// progress holds leftOnce.
func (h *holder) forcedExit(why string) {
	h.killAll()
	h.mu.Lock()
	leave := h.leave
	h.mu.Unlock()
	if leave == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		leave(why)
	}()
	select {
	case <-done:
	case <-time.After(500 * time.Millisecond):
	}
}

// hold works the queue on slot until the lifetime ends.
func (h *holder) hold(ctx context.Context, slot lock.Slot, heal func() bool) error {
	cfg := h.cfg
	h.log = h.log.With().Str("slot", slot.Name()).Str("role", lock.RoleRun).Logger()
	_ = proc.SetName("baton:run:" + strconv.Itoa(slot.Index()))
	since := time.Now()
	until := since.Add(cfg.Lifetime.D() + time.Duration(rand.Float64()*float64(cfg.Jitter.D())))
	// The hard deadline: hung handler code cannot be stopped, the process
	// can. A frozen process cannot stop itself: others kill it past the
	// deadline in its record (standby.HealMargin).
	deadline := until.Add(cfg.ShutdownGrace.D() + hardMargin)
	// The token proves which processes are this tenure's: its jobs carry it.
	token := proc.NewToken()
	rec := h.record(lock.RoleRun, since, until)
	rec.Token = token
	rec.Deadline, rec.BootDeadline = deadline, lock.BootClock()+time.Until(deadline)
	if err := refuseUnhealable(slot.Publish(rec), slot, h.cfg.LockDir); err != nil {
		return err
	}
	if h.rdb == nil {
		if err := h.connect(ctx); err != nil {
			return err
		}
	}
	hard := time.AfterFunc(time.Until(deadline), func() {
		h.log.Error().Msg("hard deadline: jobs still running after lifetime + shutdown_grace; killing them and exiting")
		h.forcedExit(history.WhyError)
		os.Exit(ExitRuntime)
	})
	defer hard.Stop()

	sig := ctx // done when told to stop
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-slot.Lost():
			// Another process holds the slot now and, being its consumer,
			// replays its pending entries: running them here too would run
			// them twice at once. Stop everything now; they stay pending.
			msg := "slot lost (lock file replaced by one another process holds): killing jobs and leaving at once; they stay pending for the slot's holder"
			if why, ok := slot.(interface{ LostReason() string }); ok {
				msg = "slot lost (" + why.LostReason() + "): killing jobs and leaving at once; they stay pending for the slot's next holder"
			}
			h.log.Error().Msg(msg)
			h.killAll()
			os.Exit(ExitRuntime)
		case <-ctx.Done():
		}
	}()

	// Jobs inherit these (the handlers take the holder's environment).
	_ = os.Setenv(config.EnvHost, h.host)
	fenceKey, fence := fenceOf(slot)
	if fenceKey != "" {
		_ = os.Setenv(envFence, strconv.FormatInt(fence, 10))
	}
	rate, _ := work.ParseRate(cfg.RateLimit) // validated by Load
	handler := h.e.Handler
	var persist *work.Persistent
	switch {
	case handler != nil:
	case cfg.Persistent:
		persist = &work.Persistent{Argv: h.argv, Timeout: cfg.JobTimeout.D(), HeartbeatTimeout: cfg.HeartbeatTimeout.D(),
			MaxJobsPerChild: cfg.MaxJobsPerChild, MaxRSS: int64(cfg.MaxChildRSS), Grace: cfg.ShutdownGrace.D(),
			Logger: h.log, Holder: token}
		handler, h.kids = persist, persist
	default:
		x := &work.Exec{Argv: h.argv, Timeout: cfg.JobTimeout.D(), RejectExitCodes: cfg.RejectExitCodes,
			Grace: cfg.ShutdownGrace.D(), Logger: h.log, Holder: token}
		handler, h.kids = x, x
	}
	// The leave is recorded in the slot history last, once the children
	// are stopped and the orphans killed, just before the slot is released
	// (serve): a persistent child that ignores its stop message keeps the
	// slot held for up to shutdown_grace, and no standby can take it
	// meanwhile. Recorded when work.Run returned, that time counted as the
	// slot free (time below k, the next holder's gap) while it was held.
	var leave func()
	defer func() {
		if leave != nil {
			leave()
		}
	}()
	if h.kids != nil {
		h.adopt()
		defer h.killOrphans()
	}
	if persist != nil {
		// Once the jobs are done each child gets the stop message; all must
		// be gone before the hard deadline.
		defer func() {
			ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(-hardMargin/2))
			defer cancel()
			_ = persist.Close(ctx)
		}()
	}
	consumer := consumerName(cfg, slot.Name()) // h.host is cfg.Host
	if prev := slot.Inherited(); prev != nil {
		// The previous holder died holding the slot: what its jobs started may
		// live on; they carry its token, and nothing else does.
		holders := lock.FlockHolders() // a holder a job started is not a leftover
		if n := proc.KillHolderLeftovers(prev.Token, func(pid int) bool { return holders[pid] }); n > 0 {
			h.log.Warn().Int("processes", n).Int("previous_pid", prev.PID).Msg("killed processes left running by this slot's previous holder")
		}
	}
	var fenceCfg *work.Fence
	if fenceKey != "" {
		fenceCfg = &work.Fence{Key: fenceKey, Token: fence}
	}
	st := new(work.Stats)
	var step func(*lock.Record)
	sc := h.newScaler(slot, st, until, sig, cancel)
	if sc != nil {
		step = sc.step
	}
	var children func() []lock.Child
	if persist != nil {
		children = func() []lock.Child { return recordChildren(persist.Children()) }
	}
	stopPublish := publish(slot, rec, st, children, heal, step, h.log)
	h.took(slot)
	h.mu.Lock()
	h.leave = func(why string) { h.left(slot, why, st.Done.Load(), 500*time.Millisecond) }
	h.mu.Unlock()
	stopWatch := h.watchSlots(slot.Name(), st.Dead.Load)
	stopMetrics := h.writeMetrics()
	defer stopMetrics()
	warned := false // per-minute samples of the totals, for baton web's charts
	stopSampling := work.StartSampling(h.rdb, cfg.Queue, func(err error) {
		if !warned {
			h.log.Warn().Err(err).Msg("cannot sample the queue's totals (baton web's charts); retrying")
		}
		warned = true
	})
	defer stopSampling()
	entries, _ := cfg.PeriodicEntries() // checked by Load
	stopPeriodic, err := periodic.Start(periodic.Config{Client: h.rdb, Queue: cfg.Queue, Host: h.host, Entries: entries, Fence: fenceCfg, Logger: h.log})
	if err != nil {
		return err
	}
	defer stopPeriodic()
	defer cronfire.Start(h.rdb, cfg.LockDir, cfg.Queue, h.host, h.log)()
	h.log.Info().Time("until", until).Msg("holding run slot")
	err = work.Run(ctx, work.Config{
		Client: h.rdb, Queue: cfg.Queue, Consumer: consumer, Handler: handler,
		Concurrency: cfg.Concurrency, Deadline: until, Grace: cfg.ShutdownGrace.D(), JobTimeout: cfg.JobTimeout.D(),
		MaxJobs: cfg.MaxJobs, RedisDownExit: cfg.RedisDownExit.D(),
		MaxAttempts: cfg.MaxAttempts, RetryBackoff: cfg.RetryBackoff.D(), RetryBackoffMax: cfg.RetryBackoffMax.D(),
		DeadMax: cfg.DeadMax, Retention: cfg.Retention.D(), RetentionMax: cfg.RetentionMax, MaxPayload: cfg.MaxPayload, VisibilityTimeout: cfg.VisibilityTimeout.D(),
		RateLimit: rate, Fence: fenceCfg,
		Logger: h.log,
	}, st)
	stopPublish()
	stopWatch()
	why := leftWhy(err, sig, until)
	if why == history.WhyMaxJobs && sc != nil && sc.left { // read after stopPublish: no step runs now
		why = history.WhyIdle
	}
	leave = func() { h.left(slot, why, st.Done.Load(), 2*time.Second) }
	h.log.Info().Int64("jobs_done", st.Done.Load()).Int64("jobs_failed", st.Failed.Load()).Int64("jobs_dead", st.Dead.Load()).Msg("leaving run slot")
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// refuseShared refuses a lock dir whose slots of this queue are held by a
// live holder of another Redis database or server (a record naming another
// target): two deployments (production and staging, one queue name) would
// share one set of slots, and one's idle holders would starve the other's
// jobs. Exit 2 before taking a slot: the config is wrong, not the moment.
// It reads the records only, no lock and no Redis.
func refuseShared(cfg *config.Config, sets ...lock.Set) error {
	for _, s := range sets {
		fs, ok := s.(*lock.FileSet)
		if !ok {
			continue
		}
		if r, ok := fs.Foreign(); ok {
			return usagef(fmt.Sprintf("give each deployment its own lock_dir (e.g. lock_dir = %q), or point both at the same Redis database",
				filepath.Join(cfg.LockDir, "<deployment>")),
				"lock dir %s is shared with another deployment: %s slot %d of queue %s is held by pid %d working in Redis %s, not %s (this config's); "+
					"their holders would take this deployment's slots", cfg.LockDir, r.Role, r.Slot, cfg.Queue, r.PID, r.Target, cfg.RedisTarget())
		}
	}
	return nil
}

// refuseUnhealable turns err, from publishing a record with a hard
// deadline, into the error that makes slot's holder leave before it works:
// when the deadline could be written nowhere (a full disk as the slot was
// won), nobody could ever prove the holder overdue, and a frozen one would
// keep the slot forever. Other publish errors are the publish loop's to
// log and retry: the deadline is in the lock file.
func refuseUnhealable(err error, slot lock.Slot, dir string) error {
	if !errors.Is(err, lock.ErrDeadlineUnpublished) {
		return nil
	}
	return &hintError{msg: fmt.Sprintf("refusing slot %s: its hard deadline cannot be published in %s, so a frozen holder could never be healed: %v",
		slot.Name(), dir, err), hint: "free space on the filesystem of lock_dir (df " + dir + ")", err: err}
}

// leftWhy says why a holder left: err is work.Run's, sig ends on a signal.
func leftWhy(err error, sig context.Context, until time.Time) string {
	switch {
	case sig.Err() != nil:
		return history.WhyStopped
	case err != nil && !errors.Is(err, context.Canceled):
		return history.WhyError
	case err == nil && !time.Now().Before(until):
		return history.WhyLifetime
	}
	return history.WhyMaxJobs // or idle above min_slots: the caller knows
}

func (h *holder) record(role string, since, until time.Time) lock.Record {
	start, _ := proc.StartTime(os.Getpid())
	return lock.Record{PID: os.Getpid(), Start: start, Host: h.host, Role: role, Since: since, Until: until}
}

// killAll kills, for a forced exit, the running jobs or children and every
// process they started, daemons included, waiting up to half a second for
// the killed to let go of their children (proc.KillDescendants): a daemon
// reparented only after the holder exits would live on under init.
func (h *holder) killAll() {
	if h.kids != nil {
		h.kids.KillAll()
		if n := proc.KillDescendants(500 * time.Millisecond); n > 0 {
			h.log.Info().Int("processes", n).Msg("killed the jobs' processes")
		}
	}
}

// adopt makes the holder a child subreaper, so that what its jobs leave
// running (a daemon, a double fork) is reparented to it, not to init: the
// exec handler kills a job's orphans when the job ends, and killOrphans the
// rest when the holder leaves. Exec mode only: a Go handler's own children
// are waited for by code that does not register them (proc.Start).
func (h *holder) adopt() {
	if err := proc.BecomeSubreaper(); err != nil {
		h.log.Warn().Err(err).Msg("cannot become a child subreaper: processes that jobs daemonize may outlive them")
	}
}

// killOrphans kills everything adopted from this holder's jobs: every child
// it did not start itself, with its process tree, whatever its environment
// (spawned candidates are started through proc.Start and are left alone).
func (h *holder) killOrphans() {
	if !proc.Subreaper() {
		return
	}
	if n := proc.KillOrphans(func([]byte) bool { return true }); n > 0 {
		h.log.Info().Int("processes", n).Msg("killed processes that jobs left running")
	}
}

// publish refreshes the slot record with progress every half second, in a
// goroutine that the returned func stops (and waits for); step, when not
// nil, takes the scale decision once a second. A record that
// cannot be written (a full disk) is retried every tick; the failure is
// logged once, and the recovery. children, unless nil, lists a persistent
// holder's children for the record; step, unless nil, is the scaler's turn,
// once a second.
func publish(slot lock.Slot, rec lock.Record, st *work.Stats, children func() []lock.Child, heal func() bool, step func(*lock.Record), log zerolog.Logger) (stop func()) {
	failing := false
	put := func(r lock.Record) {
		err := slot.Publish(r)
		switch {
		case err != nil && !failing:
			log.Error().Err(err).Msg("cannot publish the slot record: status shows this slot as held without a record; retrying")
		case err == nil && failing:
			log.Info().Msg("slot record published again")
		}
		failing = err != nil
	}
	put(rec)
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for tick := 0; ; tick++ {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			if tick%2 == 1 {
				heal() // a frozen sibling: once a second
			}
			next := rec
			next.JobsDone = st.Done.Load()
			next.Job, next.JobSince = "", time.Time{}
			if j := st.Recent.Load(); j != nil {
				next.Job, next.JobSince = j.ID, j.Started
			}
			if step != nil && tick%2 == 1 {
				step(&next)
			}
			if children != nil {
				next.Children = children()
			}
			if !sameRecord(next, rec) || failing {
				rec = next
				put(rec)
			}
		}
	}()
	return func() { close(quit); <-done }
}

// recordChildren is a persistent holder's children as its record shows them.
func recordChildren(cs []work.ChildInfo) []lock.Child {
	out := make([]lock.Child, len(cs))
	for i, c := range cs {
		out[i] = lock.Child{PID: c.PID, Jobs: c.Jobs, RSS: c.RSS}
	}
	return out
}

// sameRecord: a and b would be written alike (a Record holds a slice, so
// == cannot say).
func sameRecord(a, b lock.Record) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && bytes.Equal(ja, jb)
}

// writeMetrics rewrites metrics_file every 5s while the holder runs, in a
// goroutine the returned func stops (and waits for). A failure is logged
// once, at warn; the holder carries on.
func (h *holder) writeMetrics() (stop func()) {
	path := h.cfg.MetricsFile
	c := h.metricsCollector()
	if c == nil {
		return func() {}
	}
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		failing := false
		for {
			err := metrics.WriteFile(path, c)
			if err != nil && !failing {
				h.log.Warn().Err(err).Str("metrics_file", path).Msg("cannot write the metrics file; retrying every 5s")
			}
			failing = err != nil
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(quit); <-done }
}

// metricsCollector is the queue's collector for metrics_file, built once
// (in fleet mode its slot sets hold a lease client), or nil when there is no
// file to write.
func (h *holder) metricsCollector() *metrics.Collector {
	if h.collector != nil || h.cfg.MetricsFile == "" || h.rdb == nil {
		return h.collector
	}
	run, sb, err := slotSets(h.cfg)
	if err != nil {
		return nil
	}
	q := metrics.Queue{Name: h.cfg.Queue, Run: run, Keep: h.cfg.MinSlots}
	if sb != nil {
		q.Standby = sb
	}
	h.collector = metrics.NewCollector(h.rdb, q)
	return h.collector
}

// writeMetricsOnce rewrites metrics_file once, as a holder leaves.
func (h *holder) writeMetricsOnce() {
	if c := h.metricsCollector(); c != nil {
		if err := metrics.WriteFile(h.cfg.MetricsFile, c); err != nil {
			h.log.Warn().Err(err).Str("metrics_file", h.cfg.MetricsFile).Msg("cannot write the metrics file")
		}
	}
}
