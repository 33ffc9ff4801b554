package config

import (
	"errors"
	"fmt"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/work"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

// MaxSlots bounds slots and standby_slots: consumer names stay few.
const MaxSlots = 1024

// The lengths are checked apart: a bounded repeat such as {0,252} compiles
// to one copy per repeat, thousands of allocations at every start, losing
// cron candidates included.
var hostName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

var queueName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]*$`)

// Validate reports the first impossible value as an *Error naming its key.
func (c *Config) Validate() error {
	bad := func(k, format string, a ...any) error { return &Error{Key: k, Msg: fmt.Sprintf(format, a...)} }
	switch {
	case len(c.Queue) > 100 || !queueName.MatchString(c.Queue):
		return bad("queue", "%q: use 1-100 letters, digits, '_', '.', ':' or '-', starting with a letter or digit", c.Queue)
	case c.LockDir == "":
		return bad("lock_dir", "must not be empty")
	case c.Slots < 1 || c.Slots > MaxSlots:
		return bad("slots", "%d: must be between 1 and %d", c.Slots, MaxSlots)
	case c.StandbySlots < 0 || c.StandbySlots > MaxSlots:
		return bad("standby_slots", "%d: must be between 0 and %d", c.StandbySlots, MaxSlots)
	case c.LockBackend != "file" && c.LockBackend != "redis":
		return bad("lock_backend", "%q: want file or redis", c.LockBackend)
	case len(c.Host) > 253 || !hostName.MatchString(c.Host):
		return bad("host", "%q: use 1-253 letters, digits, '_', '.' or '-' (a hostname or a pod name)", c.Host)
	case c.LeaseTTL.D() < 100*time.Millisecond:
		return bad("lease_ttl", "%s: must be at least 100ms", c.LeaseTTL)
	case lock.CheckLeaseOrder(c.LeaseTTL.D(), lock.DeadlineFor(c.LeaseTTL.D()), c.LeaseRenew.D()) != nil:
		return bad("lease_renew", "%s: must be positive and below the renew deadline %s (2/3 of lease_ttl %s): lease_ttl > renew deadline > lease_renew, or one slow renewal fences a healthy holder",
			c.LeaseRenew, lock.DeadlineFor(c.LeaseTTL.D()), c.LeaseTTL)
	case c.MaxPerHost < 0 || c.MaxPerHost > MaxSlots:
		return bad("max_per_host", "%d: must be between 0 (unlimited) and %d", c.MaxPerHost, MaxSlots)
	case c.MinSlots < 1 || c.MinSlots > c.Slots:
		return bad("min_slots", "%d: must be between 1 and slots (%d)", c.MinSlots, c.Slots)
	case c.ScaleUpBacklog < 1:
		return bad("scale_up_backlog", "%d: must be at least 1", c.ScaleUpBacklog)
	case c.ScaleUpAge.Duration < 0:
		return bad("scale_up_age", "%s: must not be negative (0 turns it off)", c.ScaleUpAge)
	case c.ScaleUpEvery.Duration < 100*time.Millisecond:
		return bad("scale_up_every", "%s: must be at least 100ms", c.ScaleUpEvery)
	case c.IdleExit.Duration < time.Second:
		return bad("idle_exit", "%s: must be at least 1s", c.IdleExit)
	case c.Spawn < 1 || c.Spawn > 64:
		return bad("spawn", "%d: must be between 1 and 64", c.Spawn)
	case c.Lifetime.Duration <= 0:
		return bad("lifetime", "%s: must be positive", c.Lifetime)
	case c.Jitter.Duration < 0:
		return bad("jitter", "%s: must not be negative", c.Jitter)
	case c.StandbyWait.Duration < 0:
		return bad("standby_wait", "%s: must not be negative", c.StandbyWait)
	case c.PollInterval.D() < 10*time.Millisecond:
		return bad("poll_interval", "%s: must be at least 10ms", c.PollInterval)
	case c.Concurrency < 1 || c.Concurrency > 1024:
		return bad("concurrency", "%d: must be between 1 and 1024", c.Concurrency)
	case c.JobTimeout.Duration < 0:
		return bad("job_timeout", "%s: must not be negative (0 means no limit)", c.JobTimeout)
	case c.ShutdownGrace.Duration < 0:
		return bad("shutdown_grace", "%s: must not be negative", c.ShutdownGrace)
	case c.VisibilityTimeout.Duration < 0:
		return bad("visibility_timeout", "%s: must not be negative (0 turns claiming off)", c.VisibilityTimeout)
	case c.VisibilityTimeout.Duration > 0 && c.VisibilityTimeout.Duration <= c.JobTimeout.Duration+c.ShutdownGrace.Duration:
		return bad("visibility_timeout", "%s: must exceed job_timeout + shutdown_grace (%s), or a running job could be taken from a live holder",
			c.VisibilityTimeout, c.JobTimeout.Duration+c.ShutdownGrace.Duration)
	case badExitCode(c.RejectExitCodes) >= 0:
		return bad("reject_exit_codes", "%d: want exit statuses between 1 and 255 (0 is success)", c.RejectExitCodes[badExitCode(c.RejectExitCodes)])
	case c.MaxAttempts < 1 || c.MaxAttempts > 1000:
		return bad("max_attempts", "%d: must be between 1 and 1000", c.MaxAttempts)
	case c.RetryBackoff.Duration <= 0:
		return bad("retry_backoff", "%s: must be positive", c.RetryBackoff)
	case c.RetryBackoffMax.Duration < c.RetryBackoff.Duration:
		return bad("retry_backoff_max", "%s: must be at least retry_backoff (%s)", c.RetryBackoffMax, c.RetryBackoff)
	case c.DeadMax < 1:
		return bad("dead_max", "%d: must be at least 1", c.DeadMax)
	case c.Retention.Duration < 0:
		return bad("retention", "%s: must not be negative (0 keeps no done jobs)", c.Retention)
	case c.Retention.Duration > 0 && c.Retention.Duration < time.Millisecond:
		return bad("retention", "%s: must be at least 1ms (0 keeps no done jobs)", c.Retention)
	case c.ResultMax < 1 || c.ResultMax > work.MaxResultMax:
		return bad("result_max", "%d: must be between 1 and %d bytes", c.ResultMax, work.MaxResultMax)
	case c.RetentionMax < 1:
		return bad("retention_max", "%d: must be at least 1", c.RetentionMax)
	case c.MaxPayload < 1 || c.MaxPayload > 512<<20:
		return bad("max_payload", "%d: must be between 1 and %d bytes (Redis's limit)", c.MaxPayload, 512<<20)
	case c.RedisDownExit.Duration <= 0:
		return bad("redis_down_exit", "%s: must be positive", c.RedisDownExit)
	case c.MaxJobs < 0:
		return bad("max_jobs", "%d: must not be negative (0 means unlimited)", c.MaxJobs)
	case c.HeartbeatTimeout.Duration < 0:
		return bad("heartbeat_timeout", "%s: must not be negative (0 turns it off)", c.HeartbeatTimeout)
	case c.HeartbeatTimeout.Duration > 0 && c.HeartbeatTimeout.Duration < 100*time.Millisecond:
		return bad("heartbeat_timeout", "%s: must be at least 100ms (0 turns it off)", c.HeartbeatTimeout)
	case c.MaxJobsPerChild < 0:
		return bad("max_jobs_per_child", "%d: must not be negative (0 means unlimited)", c.MaxJobsPerChild)
	case c.MaxChildRSS < 0:
		return bad("max_child_rss", "%d: must not be negative (0 turns it off)", c.MaxChildRSS)
	case c.LogLevel != "debug" && c.LogLevel != "info" && c.LogLevel != "warn" && c.LogLevel != "error":
		return bad("log_level", "%q: want debug, info, warn or error", c.LogLevel)
	case c.LogFormat != "auto" && c.LogFormat != "json" && c.LogFormat != "console":
		return bad("log_format", "%q: want auto, json or console", c.LogFormat)
	}
	if _, err := redis.ParseURL(c.RedisURL); err != nil {
		return bad("redis_url", "%s", URLError(c.RedisURL, err))
	}
	if err := c.validateTopology(); err != nil {
		return err
	}
	switch {
	case c.EnqueueWaitReplicas < 0 || c.EnqueueWaitReplicas > 64:
		return bad("enqueue_wait_replicas", "%d: must be between 0 (off) and 64", c.EnqueueWaitReplicas)
	case c.EnqueueWaitReplicas > 0 && len(c.RedisCluster) > 0:
		return bad("enqueue_wait_replicas", "%d with redis_cluster: not supported on a Cluster (WAIT has no key to route by); set it to 0", c.EnqueueWaitReplicas)
	case c.EnqueueWaitTimeout.D() < time.Millisecond:
		return bad("enqueue_wait_timeout", "%s: must be at least 1ms (WAIT 0 would wait forever)", c.EnqueueWaitTimeout)
	}
	if _, err := work.ParseRate(c.RateLimit); err != nil {
		return bad("rate_limit", "%v", err)
	}
	if err := c.validateKeys(); err != nil {
		return err
	}
	if _, err := cron.ParseStandard(c.Schedule); err != nil {
		return bad("schedule", "%q: %v", c.Schedule, err)
	}
	if _, err := c.PeriodicEntries(); err != nil {
		return err
	}
	return nil
}

// badExitCode returns the index of the first code that is no failure a
// process can exit with (0 is success), or -1.
func badExitCode(codes []int) int {
	for i, c := range codes {
		if c < 1 || c > 255 {
			return i
		}
	}
	return -1
}

// RedactURL hides the password of a URL, for logs and errors:
// redis://:xxxxx@host:6379/0 (and ?password=xxxxx). A string that does not parse as a URL is
// redacted too: everything between "://" and the last "@" is taken for the
// userinfo, since an unescaped password may hold '/', '@', '%' or spaces.
func RedactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		if q := u.Query(); q.Has("password") { // go-redis reads ?password= too
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.Redacted()
	}
	user, pass, rest, ok := splitUserinfo(s)
	if !ok || pass == "" {
		return s
	}
	return user + ":xxxxx@" + rest
}

// splitUserinfo cuts s at the userinfo by a plain scan: before is up to and
// including the user name, pass the password, after what follows the last '@'.
func splitUserinfo(s string) (before, pass, after string, ok bool) {
	start := 0
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + 3
	}
	at := strings.LastIndexByte(s[start:], '@')
	if at < 0 {
		return "", "", "", false
	}
	at += start
	info := s[start:at]
	colon := strings.IndexByte(info, ':')
	if colon < 0 {
		return s[:at], "", s[at+1:], true
	}
	return s[:start+colon], info[colon+1:], s[at+1:], true
}

// URLError describes err, from parsing the URL raw, without the password:
// the parser's own message quotes the raw URL, password and all.
func URLError(raw string, err error) string {
	var ue *url.Error
	parse := errors.As(err, &ue)
	if parse {
		err = ue.Err
	}
	msg := strings.TrimPrefix(err.Error(), "redis: ")
	if _, pass, _, ok := splitUserinfo(raw); ok && pass != "" {
		if parse && needsEscape(pass) {
			msg = "the password must be %-escaped (space %20, % %25, @ %40, / %2F, ? %3F, # %23)"
		}
		msg = strings.ReplaceAll(msg, pass, "xxxxx")
	}
	return RedactURL(raw) + ": " + msg
}

// needsEscape reports whether a URL password holds a character it cannot
// hold as it is: a delimiter, a space, or a '%' not starting an escape.
func needsEscape(pass string) bool {
	if strings.ContainsAny(pass, " @/?#[]\\") {
		return true
	}
	for i := 0; i < len(pass); i++ {
		if pass[i] == '%' {
			if _, err := url.PathUnescape(pass[i:min(i+3, len(pass))]); err != nil {
				return true
			}
		}
	}
	return false
}
