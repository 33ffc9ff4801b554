// Package config reads baton's settings: a strict TOML file, every key also a
// kebab-case flag, and BATON_REDIS_URL (with BATON_REDIS_SENTINEL_PASSWORD
// and BATON_HOST) from the environment.
//
// Most callers need Bind and then Flags.Load after the flag set is parsed.
// Precedence, lowest first: defaults, the file, the environment, flags.
// Every failure is an *Error naming the file and line (or the flag) and the key,
// so the CLI can print one line and exit 2.
package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/work"
)

// Config is one queue's settings. Every field is one TOML key and one flag;
// its group (a Group) heads it in --help and lets a command bind only the
// keys it uses.
type Config struct {
	// Queue names the Redis Stream baton:{queue} and the lock files. Default "default".
	Queue string `toml:"queue" group:"Connection" help:"queue name: Redis keys baton:{queue}, lock files <queue>.run.<i>"`
	// RedisURL is redis://[:password@]host:port/db. Default redis://127.0.0.1:6379/0;
	// BATON_REDIS_URL overrides the file so passwords stay out of crontab and ps.
	RedisURL string `toml:"redis_url" group:"Connection" help:"Redis URL (prefer env BATON_REDIS_URL for passwords)"`
	// RedisSentinels are the host:port addresses of the Sentinels that
	// monitor RedisMaster: baton asks them for the master and follows a
	// failover. redis_url then gives only the password, TLS and database.
	// Default none (redis_url is the server).
	RedisSentinels []string `toml:"redis_sentinels" group:"Connection" help:"Sentinel addresses host:port (with redis_master; redis_url then gives only password, TLS, db)"`
	// RedisMaster is the master name the Sentinels monitor ("mymaster").
	// Required with RedisSentinels, refused without. Default "".
	RedisMaster string `toml:"redis_master" group:"Connection" help:"master name the Sentinels monitor (with redis_sentinels)"`
	// RedisSentinelPassword is the Sentinels' own password (requirepass in
	// sentinel.conf), not the master's (that one is in redis_url). Only
	// with redis_sentinels. BATON_REDIS_SENTINEL_PASSWORD overrides the
	// file so it stays out of crontab and ps; baton never prints it and
	// jobs do not inherit it. Default "" (Sentinels without a password).
	RedisSentinelPassword string `toml:"redis_sentinel_password" group:"Connection" help:"the Sentinels' own password (prefer env BATON_REDIS_SENTINEL_PASSWORD)"`
	// RedisSentinelUsername is the Sentinels' ACL user that
	// redis_sentinel_password belongs to. Only with it. Default "" (the
	// default user).
	RedisSentinelUsername string `toml:"redis_sentinel_username" group:"Connection" help:"the Sentinels' ACL user (with redis_sentinel_password)"`
	// RedisCluster are host:port addresses of some nodes of a Redis Cluster
	// (the rest are discovered). redis_url then gives only the password and
	// TLS; the database must be 0. Default none.
	RedisCluster []string `toml:"redis_cluster" group:"Connection" help:"Redis Cluster node addresses host:port (redis_url then gives only password, TLS)"`
	// EnqueueWaitReplicas makes enqueue send WAIT after its writes, in the
	// same round trip: it succeeds only once this many replicas have the
	// jobs, so a failover cannot lose a confirmed job. 0 = off. Default 0.
	EnqueueWaitReplicas int `toml:"enqueue_wait_replicas" group:"Jobs" help:"enqueue waits until this many replicas have the jobs (WAIT; 0: off)"`
	// EnqueueWaitTimeout bounds that wait; past it enqueue fails (exit 1),
	// though the jobs may well be queued. Default 1s.
	EnqueueWaitTimeout Duration `toml:"enqueue_wait_timeout" group:"Jobs" help:"longest enqueue waits for enqueue_wait_replicas"`
	// LockDir holds the slot lock files. Default /run/baton for root, else /tmp/baton-<uid>.
	LockDir string `toml:"lock_dir" group:"Slots" help:"directory of the slot lock files (local disk only)"`
	// Slots is N, the run slots: holders consuming at once. Default 1.
	Slots int `toml:"slots" group:"Slots" help:"run slots: holders consuming at once"`
	// StandbySlots is N_s, processes waiting to take over. Default: equal to Slots.
	StandbySlots int `toml:"standby_slots" group:"Slots" help:"standby slots (default: equal to slots)"`
	// LockBackend is where slots live: "file" (flock files in lock_dir, one
	// machine) or "redis" (leases in Redis shared by every host of the queue:
	// slots and standby_slots count fleet-wide; docs/fleet.md). Default "file".
	LockBackend string `toml:"lock_backend" group:"Slots" help:"file (flock, one machine) or redis (leases shared by every host; docs/fleet.md)"`
	// Host names this machine in leases, status, logs and jobs (BATON_HOST).
	// The env BATON_HOST overrides the file, the flag both. Default: the hostname.
	Host string `toml:"host" group:"Slots" help:"this machine's name in leases, status and logs (env BATON_HOST; default: hostname)"`
	// LeaseTTL is how long a Redis lease lasts without renewal, on Redis'
	// clock. The renew deadline is 2/3 of it. Default 15s.
	LeaseTTL Duration `toml:"lease_ttl" group:"Slots" help:"lock_backend redis: lease lifetime without renewal (renew deadline: 2/3 of it)"`
	// LeaseRenew is the time between lease renewals; must be below the renew
	// deadline (2/3 of lease_ttl). Default 2s.
	LeaseRenew Duration `toml:"lease_renew" group:"Slots" help:"lock_backend redis: time between lease renewals"`
	// MaxPerHost caps the slots (run and standby) this host takes, with flock
	// files in lock_dir checked before Redis: a candidate on a full host
	// exits without connecting. 0 = unlimited. Default 0.
	MaxPerHost int `toml:"max_per_host" group:"Slots" help:"lock_backend redis: most run and standby slots on this host (0: unlimited)"`
	// MinSlots is k, the run slots kept covered at all times (by cron and the
	// standbys); slots above k are filled only by scaling up when the
	// backlog grows, and their holders leave after IdleExit without a job.
	// Default: equal to Slots (no scaling).
	MinSlots int `toml:"min_slots" group:"Slots" help:"k: run slots kept covered; slots above k scale with the backlog (default: equal to slots)"`
	// ScaleUpBacklog is how many waiting jobs per running holder make a
	// holder start more candidates. Default 100.
	ScaleUpBacklog int `toml:"scale_up_backlog" group:"Slots" help:"waiting jobs per running holder that start more holders (min_slots < slots)"`
	// ScaleUpAge starts more candidates when the oldest waiting job has
	// waited this long, whatever the count. 0 = off. Default 10s.
	ScaleUpAge Duration `toml:"scale_up_age" group:"Slots" help:"oldest waiting job's age that starts more holders (0: off)"`
	// ScaleUpEvery is the least time between two scale-up rounds of one
	// holder. Default 1s.
	ScaleUpEvery Duration `toml:"scale_up_every" group:"Slots" help:"least time between two scale-up rounds"`
	// IdleExit is how long a holder of a slot at or above min_slots may go
	// without a job before it leaves. Default 30s.
	IdleExit Duration `toml:"idle_exit" group:"Slots" help:"a holder above min_slots leaves after this long without a job"`
	// Spawn is m, candidates started per cron firing. Default 1.
	Spawn int `toml:"spawn" group:"Slots" help:"candidates started per cron firing"`
	// Lifetime is a holder's base lifetime. Default 5m.
	Lifetime Duration `toml:"lifetime" group:"Slots" help:"holder base lifetime"`
	// Jitter is added to Lifetime, uniform in [0, Jitter). Default 1m.
	Jitter Duration `toml:"jitter" group:"Slots" help:"random extra lifetime, uniform in [0, jitter)"`
	// StandbyWait is S, how long a standby waits for promotion. Default 15m.
	StandbyWait Duration `toml:"standby_wait" group:"Slots" help:"how long a standby waits for a run slot"`
	// PollInterval is how often a standby tries the run slots (±10%). Default 500ms.
	PollInterval Duration `toml:"poll_interval" group:"Slots" help:"how often a standby tries the run slots"`
	// Concurrency is jobs at once inside one holder. Default 1.
	Concurrency int `toml:"concurrency" group:"Jobs" help:"jobs at once inside one holder"`
	// JobTimeout bounds one job; then SIGTERM, SIGKILL after ShutdownGrace. 0 = none. Default 1m.
	JobTimeout Duration `toml:"job_timeout" group:"Jobs" help:"longest a job may run (0: no limit)"`
	// ShutdownGrace is how long in-flight jobs may finish after the lifetime ends, and a
	// cancelled or timed-out job between SIGTERM and SIGKILL. 0: none. Default 30s.
	ShutdownGrace Duration `toml:"shutdown_grace" group:"Jobs" help:"time for in-flight jobs after lifetime or SIGTERM"`
	// VisibilityTimeout is how long an entry may sit pending, untouched, before any
	// holder claims it (work left by a slot that never comes back). Must exceed
	// JobTimeout + ShutdownGrace. Default 10m.
	VisibilityTimeout Duration `toml:"visibility_timeout" group:"Jobs" help:"claim entries pending this long from vanished slots"`
	// MaxAttempts is how many times a job runs before it is dead-lettered. Default 5.
	MaxAttempts int `toml:"max_attempts" group:"Retries" help:"runs of a job before it is dead-lettered"`
	// RejectExitCodes are exit statuses with which an exec job says "do not
	// retry": it is dead-lettered at once as rejected. Default [65]
	// (EX_DATAERR, sysexits.h).
	RejectExitCodes []int `toml:"reject_exit_codes" group:"Retries" help:"exit statuses that dead-letter an exec job at once (no retry)"`
	// RetryBackoff is the first retry's delay, doubled per attempt, with jitter. Default 1s.
	RetryBackoff Duration `toml:"retry_backoff" group:"Retries" help:"delay before the first retry (doubles each attempt)"`
	// RetryBackoffMax caps the retry delay. Default 10m.
	RetryBackoffMax Duration `toml:"retry_backoff_max" group:"Retries" help:"longest delay between retries"`
	// RateLimit caps jobs started per second, minute or hour across every
	// holder of the queue ("50/s", "300/m", "1000/h"), enforced in Redis; a
	// job over the limit waits. Default "" (none).
	RateLimit string `toml:"rate_limit" group:"Jobs" help:"most jobs started per s, m or h across all holders, e.g. 50/s (default: none)"`
	// KeyConcurrency caps the jobs of one key (enqueue --key) running at
	// once, fleet-wide; keys take turns either way (docs/keys.md). 0 = no
	// cap. File only, no flag (every holder of a queue must agree on
	// it). Default 0.
	KeyConcurrency int `toml:"key_concurrency"`
	// KeyLimits are per-key caps that override KeyConcurrency, e.g.
	// "tenant-42" = 1 under [key_limits]; it needs key_concurrency, the cap
	// of the other keys. File only, no flag. Default none.
	KeyLimits map[string]int `toml:"key_limits"`
	// DeadMax bounds the dead-letter stream; the oldest are dropped. Default 10000.
	DeadMax int `toml:"dead_max" group:"Retries" help:"dead letters kept; the oldest are dropped"`
	// Retention is how long a done job is remembered, so baton job can say
	// "done" and when: its id and time in baton:{queue}:done. 0 = done jobs
	// are not kept. Default 0.
	Retention Duration `toml:"retention" group:"Jobs" help:"how long done jobs are remembered for baton job (0: not kept)"`
	// RetentionMax bounds the done jobs remembered; the oldest are dropped.
	// Default 100000.
	RetentionMax int `toml:"retention_max" group:"Jobs" help:"done jobs remembered at most (with retention); the oldest are dropped"`
	// MaxPayload is the largest payload in bytes: enqueue refuses bigger ones,
	// a holder dead-letters them (too_large). Default 1048576 (1 MiB).
	MaxPayload int `toml:"max_payload" group:"Jobs" help:"largest payload in bytes"`
	// ResultMax is the largest result in bytes a job may hand back (Go
	// work.SetResult, a persistent child's result body, an exec job's
	// BATON_RESULT_FILE): a job with a larger one fails, nothing is
	// truncated. Results are kept with the done records, for retention.
	// Default 65536 (64 KiB), at most 16777216 (16 MiB).
	ResultMax int `toml:"result_max" group:"Jobs" help:"largest job result in bytes (kept for retention)"`
	// RedisDownExit is how long Redis may be unreachable before a holder
	// stops, lets in-flight jobs finish and exits 1. Default 30s.
	RedisDownExit Duration `toml:"redis_down_exit" group:"Jobs" help:"give up after Redis is unreachable this long"`
	// MaxJobs recycles a holder after about this many jobs (±10%). 0 = unlimited. Default 0.
	MaxJobs int `toml:"max_jobs" group:"Jobs" help:"recycle a holder after about this many jobs (0: unlimited)"`
	// Persistent starts one long-lived child per concurrency lane and feeds
	// it jobs over the worker protocol (docs/workers.md) instead of one child
	// per job. Default false.
	Persistent bool `toml:"persistent" group:"Workers" help:"one long-lived child per lane, fed jobs over the worker protocol (docs/workers.md)"`
	// HeartbeatTimeout kills a persistent child that sends neither a result
	// nor a heartbeat for this long during a job: the job counts as timed
	// out. 0 = off. Default 0.
	HeartbeatTimeout Duration `toml:"heartbeat_timeout" group:"Workers" help:"kill a persistent child silent this long during a job (0: off)"`
	// MaxJobsPerChild replaces a persistent child after about this many jobs
	// (±10%, so children do not restart together). 0 = unlimited. Default 0.
	MaxJobsPerChild int `toml:"max_jobs_per_child" group:"Workers" help:"replace a persistent child after about this many jobs (0: unlimited)"`
	// MaxChildRSS replaces a persistent child whose resident memory exceeds
	// this many bytes after a job. 0 = off. Default 0.
	MaxChildRSS int `toml:"max_child_rss" group:"Workers" help:"replace a persistent child whose resident memory exceeds this many bytes (0: off)"`
	// Schedule is the crontab schedule of the baton run line, for check. Default "* * * * *".
	Schedule string `toml:"schedule" group:"Slots" help:"crontab schedule that starts baton run, or @every D for a systemd timer (used by check and status)"`
	// LogLevel is debug, info, warn or error. Default info.
	LogLevel string `toml:"log_level" group:"Logging" help:"debug, info, warn or error"`
	// LogFormat is json, console, or auto (console on a terminal). Default auto.
	LogFormat string `toml:"log_format" group:"Logging" help:"json, console or auto (console on a terminal)"`
	// MetricsFile, when set, is rewritten by every running holder every 5s
	// (write, then rename) with the queue's Prometheus metrics, for
	// node_exporter's textfile collector. Default "" (none).
	MetricsFile string `toml:"metrics_file" group:"Logging" help:"rewrite this file with the queue's Prometheus metrics every 5s (textfile collector)"`
	// Periodic are the queue's [[periodic]] entries: jobs every holder
	// enqueues on a schedule, once per tick fleet-wide (docs/periodic.md).
	// File only, no flag. Default none.
	Periodic []PeriodicEntry `toml:"periodic"`
}

// PeriodicEntry is one [[periodic]] table of the config file, as written;
// Config.PeriodicEntries checks and converts it.
type PeriodicEntry struct {
	// Name identifies the entry, unique in the queue (BATON_PERIODIC).
	Name string `toml:"name"`
	// Schedule is a crontab schedule (five fields, CRON_TZ=/TZ= prefix,
	// @hourly-style names) or "@every D"; UTC without a zone.
	Schedule string `toml:"schedule"`
	// Payload is each job's payload; PayloadBase64 the same as base64, for
	// bytes (one of the two at most). Default "".
	Payload       string `toml:"payload"`
	PayloadBase64 string `toml:"payload_base64"`
	// Priority is high, normal or low. Default normal.
	Priority string `toml:"priority"`
	// Timeout overrides job_timeout for the entry's jobs. Default: job_timeout.
	Timeout Duration `toml:"timeout"`
	// MaxAttempts overrides max_attempts for the entry's jobs. Default: max_attempts.
	MaxAttempts int `toml:"max_attempts"`
	// CatchUp is what happens to ticks missed while no holder ran: latest
	// (enqueue the most recent one), none or all. Default latest.
	CatchUp string `toml:"catch_up"`
	// CatchUpMax bounds the missed ticks catch_up = "all" enqueues. Default 100.
	CatchUpMax int `toml:"catch_up_max"`
	// Key is the key of each job the entry enqueues (docs/keys.md); a job
	// with a key waits in its key's stream and takes turns. Default none.
	Key string `toml:"key"`
	// Overlap is allow (a tick is enqueued whatever the previous tick's job
	// is doing) or skip (a tick is skipped, and counted, while the previous
	// tick's job is waiting, scheduled, running or retrying). Default allow.
	Overlap string `toml:"overlap"`
}

// Groups of keys, in the order --help shows them. Each key's group is its
// struct tag; Bind takes group names and key names.
const (
	Connection = "Connection" // queue, redis_url, redis_sentinels, redis_master, redis_sentinel_password, redis_sentinel_username, redis_cluster
	Slots      = "Slots"      // lock_dir, lock_backend, host, lease_ttl, lease_renew, max_per_host, slots, standby_slots, min_slots, scale_up_*, idle_exit, spawn, lifetime, jitter, standby_wait, poll_interval, schedule
	Jobs       = "Jobs"       // enqueue_wait_replicas, enqueue_wait_timeout, concurrency, job_timeout, shutdown_grace, visibility_timeout, max_payload, rate_limit, retention, retention_max, result_max, redis_down_exit, max_jobs
	Retries    = "Retries"    // max_attempts, reject_exit_codes, retry_backoff, retry_backoff_max, dead_max
	Workers    = "Workers"    // persistent, heartbeat_timeout, max_jobs_per_child, max_child_rss
	Logging    = "Logging"    // log_level, log_format, metrics_file
	All        = "all"        // every key
)

// Default returns the settings used where neither file, env nor flag says otherwise.
func Default() Config {
	c := Config{
		Queue:             "default",
		RedisURL:          "redis://127.0.0.1:6379/0",
		LockDir:           DefaultLockDir(),
		Slots:             1,
		StandbySlots:      -1, // resolved to Slots by Load
		LockBackend:       "file",
		LeaseTTL:          Duration{lock.DefaultLeaseTTL},
		LeaseRenew:        Duration{lock.DefaultLeaseRenew},
		MinSlots:          -1, // resolved to Slots by Load
		ScaleUpBacklog:    100,
		ScaleUpAge:        Duration{10 * time.Second},
		ScaleUpEvery:      Duration{time.Second},
		IdleExit:          Duration{30 * time.Second},
		Spawn:             1,
		Lifetime:          Duration{5 * time.Minute},
		Jitter:            Duration{time.Minute},
		StandbyWait:       Duration{15 * time.Minute},
		PollInterval:      Duration{500 * time.Millisecond},
		Concurrency:       1,
		JobTimeout:        Duration{work.DefaultJobTimeout},
		ShutdownGrace:     Duration{work.DefaultGrace},
		VisibilityTimeout: Duration{10 * time.Minute},
		MaxAttempts:       work.DefaultMaxAttempts,
		RejectExitCodes:   []int{65},
		RetryBackoff:      Duration{work.DefaultRetryBackoff},
		RetryBackoffMax:   Duration{work.DefaultRetryBackoffMax},
		DeadMax:           work.DefaultDeadMax,
		RetentionMax:      work.DefaultRetentionMax,
		ResultMax:         work.DefaultResultMax,
		MaxPayload:        work.DefaultMaxPayload,
		RedisDownExit:     Duration{work.DefaultRedisDownExit},
		Schedule:          "* * * * *",
		LogLevel:          "info",
		LogFormat:         "auto",
	}
	c.EnqueueWaitTimeout = Duration{time.Second}
	return c
}

// DefaultLockDir is /run/baton for root and /tmp/baton-<uid> for others: the
// same for cron and for an interactive shell, so status sees cron's holders.
func DefaultLockDir() string {
	uid := os.Getuid()
	if uid == 0 {
		return "/run/baton"
	}
	return filepath.Join(os.TempDir(), "baton-"+strconv.Itoa(uid))
}

// Duration is a time.Duration written as a Go duration string ("90s", "5m").
// It is a struct so that a bare TOML integer (unit unknown) is a type error.
type Duration struct{ time.Duration }

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return d.Duration }

// UnmarshalText parses a Go duration string; a bare number is refused.
func (d *Duration) UnmarshalText(b []byte) error { return d.Set(string(b)) }

// MarshalText writes d as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Type implements pflag.Value.
func (d Duration) Type() string { return "duration" }

// Set implements pflag.Value.
func (d *Duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as \"90s\" or \"5m\", got %q", s)
	}
	d.Duration = v
	return nil
}
