package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/internal/rediserr"
	"github.com/redis/go-redis/v9"
)

// connect opens a client for c and checks it answers within a few seconds.
// Errors name the address with the password redacted.
func connect(ctx context.Context, c *config.Config, pool int) (*redis.Client, error) {
	rdb, err := connectLazy(c, pool)
	if err != nil {
		return nil, err
	}
	opt := rdb.Options()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, redisError(c.RedisURL, opt.TLSConfig != nil, err)
	}
	return rdb, nil
}

// redisError is err from the Redis at url as one line naming the address,
// password redacted, with a hint when the cause is known.
func redisError(url string, tlsOn bool, err error) error {
	msg, hint := rediserr.Explain(err, tlsOn)
	if msg == "" {
		msg = "unreachable: " + err.Error()
		hint = "check redis_url (or BATON_REDIS_URL) and that redis-server runs there"
	}
	return &hintError{msg: fmt.Sprintf("redis at %s: %s", config.RedactURL(url), msg), hint: hint, err: err}
}

// connectLazy opens a client for c without checking that Redis answers:
// for a long-running reader (metrics --listen) that must start, and report
// Redis down, whatever Redis is doing.
func connectLazy(c *config.Config, pool int) (*redis.Client, error) {
	opt, err := redis.ParseURL(c.RedisURL)
	if err != nil {
		return nil, &config.Error{Key: "redis_url", Msg: config.URLError(c.RedisURL, err)}
	}
	opt.PoolSize = pool
	opt.DialTimeout = 2 * time.Second
	opt.MaxRetries = 2
	return redis.NewClient(opt), nil
}

// loadAndConnect loads the config bound to cf and connects to its Redis.
func loadAndConnect(ctx context.Context, e *env, cf *config.Flags, pool int) (*config.Config, *redis.Client, error) {
	cfg, err := cf.Load(e.Getenv)
	if err != nil {
		return nil, nil, err
	}
	rdb, err := connect(ctx, cfg, pool)
	return cfg, rdb, err
}
