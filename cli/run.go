package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/baton-run/baton/history"
	"github.com/baton-run/baton/holder"
	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/internal/cronfire"
	"github.com/baton-run/baton/internal/proc"
	"github.com/baton-run/baton/internal/rediserr"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/standby"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace"
)

const runUsage = `Usage: baton run [flags] -- CMD [ARGS...]

Take a run slot, or else a standby slot, and drain the queue until the
lifetime ends. Meant to be started by cron every minute: a start that finds
every slot taken exits 0 at once, without connecting to Redis.

Each job runs CMD once, with the payload on stdin (never in argv) and
BATON_JOB_ID, BATON_ATTEMPT, BATON_QUEUE, BATON_SLOT, BATON_HOLDER (the
holder's random token), BATON_RUN and BATON_HOST in the environment, and,
with lock_backend redis, BATON_FENCE (the lease's fencing token), but not
BATON_REDIS_URL. What the job writes to the file $BATON_RESULT_FILE is its
result ('baton job ID --result', kept for retention, at most result_max
bytes); lines "PCT MESSAGE" it writes to the fd $BATON_PROGRESS_FD are its
progress ('baton job', 'baton status'). A keyed job also gets BATON_KEY,
a batch's callback BATON_BATCH and BATON_BATCH_SUMMARY, a traced job
TRACEPARENT. Exit 0 marks the job done. Any other exit is retried with
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

// envScale marks a candidate started by a holder to scale up: it takes a
// free run slot or exits, never a standby slot.
const envScale = "BATON_SCALE"

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
	allRun, allSb, err := slotSets(cfg)
	runSet, sbSet := allRun, allSb
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
	// Tracing, once a slot is won: a losing candidate costs nothing more.
	tp := startTracing(ctx, e, logWarn(log))
	defer stopTracing(tp, holderFlush, log)
	h := newHolder(e, cfg, log, argv, allRun, allSb, p.Heal, tp)
	return holdSlot(ctx, e, h, log, p, role, slot)
}

// newHolder is the holder of what this process won: all the queue's run
// slots and its standby slots (run, sb), and the process's hooks.
func newHolder(e *env, cfg *config.Config, log zerolog.Logger, argv []string, run, sb lock.Set, heal func() bool, tp trace.TracerProvider) *holder.Holder {
	return holder.New(holder.Options{Settings: cfg, Run: run, Standby: sb, Handler: e.Handler, Argv: argv, Heal: heal, TracerProvider: tp,
		OwnsProcess: true, Log: log, Hooks: holder.Hooks{
			Connect: func(ctx context.Context) (redis.UniversalClient, error) {
				// A few connections dialled ahead: as a holder starts, its
				// reader, settler, sampler and slot history all want one at
				// once, and a promoted standby would dial them inside the
				// hand-over's gap.
				t := poolOpts(cfg.Concurrency + 4)
				t.minIdle = 3
				return connectWith(ctx, cfg, t)
			},
			Exit:  func(error) { exitNow(e, ExitRuntime) },
			Spawn: func(n int) int { return spawn(log, n, envScale+"=1") },
		}})
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

// holdSlot holds slot (a standby slot first, when role says so) with h until
// it leaves. The first SIGTERM or SIGINT drains; the second kills the jobs
// and exits.
func holdSlot(ctx context.Context, e *env, h *holder.Holder, log zerolog.Logger, p *standby.Protocol, role standby.Role, slot lock.Slot) error {
	ctx, stopSignals := drainOnSignal(ctx, log, func() {
		h.Abort(history.WhyStopped)
		exitNow(e, ExitRuntime)
	})
	defer stopSignals()
	defer h.Close()
	if role == standby.Standby {
		var err error
		if slot, err = h.Stand(ctx, p, slot); err != nil || slot == nil {
			return holdError(err)
		}
	}
	return holdError(h.Hold(ctx, slot))
}

// holdError adds its hint to a holder's error.
func holdError(err error) error {
	var ue *holder.UnhealableError
	if errors.As(err, &ue) {
		return &hintError{msg: ue.Error(), hint: "free space on the filesystem of lock_dir (df " + ue.Dir + ")", err: err}
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
		if s == nil {
			continue // no standby set
		}
		sh := s.Capabilities().Shared
		if sh == nil {
			continue
		}
		if r, ok := sh.Foreign(); ok {
			return usagef(fmt.Sprintf("give each deployment its own lock_dir (e.g. lock_dir = %q), or point both at the same Redis database",
				filepath.Join(cfg.LockDir, "<deployment>")),
				"lock dir %s is shared with another deployment: %s slot %d of queue %s is held by pid %d working in Redis %s, not %s (this config's); "+
					"their holders would take this deployment's slots", cfg.LockDir, r.Role, r.Slot, cfg.Queue, r.PID, r.Target, cfg.RedisTarget())
		}
	}
	return nil
}
