package config

import (
	"fmt"
	"net/url"
	"regexp"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

// MaxSlots bounds slots and standby_slots: consumer names stay few.
const MaxSlots = 1024

var queueName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$`)

// Validate reports the first impossible value as an *Error naming its key.
func (c *Config) Validate() error {
	bad := func(k, format string, a ...any) error { return &Error{Key: k, Msg: fmt.Sprintf(format, a...)} }
	switch {
	case !queueName.MatchString(c.Queue):
		return bad("queue", "%q: use 1-100 letters, digits, '_', '.', ':' or '-', starting with a letter or digit", c.Queue)
	case c.LockDir == "":
		return bad("lock_dir", "must not be empty")
	case c.Slots < 1 || c.Slots > MaxSlots:
		return bad("slots", "%d: must be between 1 and %d", c.Slots, MaxSlots)
	case c.StandbySlots < 0 || c.StandbySlots > MaxSlots:
		return bad("standby_slots", "%d: must be between 0 and %d", c.StandbySlots, MaxSlots)
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
	case c.MaxAttempts < 1 || c.MaxAttempts > 1000:
		return bad("max_attempts", "%d: must be between 1 and 1000", c.MaxAttempts)
	case c.RetryBackoff.Duration <= 0:
		return bad("retry_backoff", "%s: must be positive", c.RetryBackoff)
	case c.RetryBackoffMax.Duration < c.RetryBackoff.Duration:
		return bad("retry_backoff_max", "%s: must be at least retry_backoff (%s)", c.RetryBackoffMax, c.RetryBackoff)
	case c.DeadMax < 1:
		return bad("dead_max", "%d: must be at least 1", c.DeadMax)
	case c.MaxPayload < 1 || c.MaxPayload > 512<<20:
		return bad("max_payload", "%d: must be between 1 and %d bytes (Redis's limit)", c.MaxPayload, 512<<20)
	case c.RedisDownExit.Duration <= 0:
		return bad("redis_down_exit", "%s: must be positive", c.RedisDownExit)
	case c.MaxJobs < 0:
		return bad("max_jobs", "%d: must not be negative (0 means unlimited)", c.MaxJobs)
	case c.LogLevel != "debug" && c.LogLevel != "info" && c.LogLevel != "warn" && c.LogLevel != "error":
		return bad("log_level", "%q: want debug, info, warn or error", c.LogLevel)
	case c.LogFormat != "auto" && c.LogFormat != "json" && c.LogFormat != "console":
		return bad("log_format", "%q: want auto, json or console", c.LogFormat)
	}
	if _, err := redis.ParseURL(c.RedisURL); err != nil {
		return bad("redis_url", "%s: %v", RedactURL(c.RedisURL), err)
	}
	if _, err := cron.ParseStandard(c.Schedule); err != nil {
		return bad("schedule", "%q: %v", c.Schedule, err)
	}
	return nil
}

// RedactURL hides the password of a Redis URL, for logs and errors.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
