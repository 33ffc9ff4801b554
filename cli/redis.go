package cli

import (
	"context"
	"strings"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/internal/rediserr"
	"github.com/redis/go-redis/v9"
)

// connect opens a client for c and checks it answers within a few seconds.
// Errors name the address with the password redacted.
func connect(ctx context.Context, c *config.Config, pool int) (redis.UniversalClient, error) {
	return connectWith(ctx, c, poolOpts(pool))
}

// poolOpts is the usual tuning of a client with pool connections.
func poolOpts(pool int) clientOpts {
	return clientOpts{pool: pool, dial: 2 * time.Second, retries: 2}
}

// connectWith is connect with t's tuning.
func connectWith(ctx context.Context, c *config.Config, t clientOpts) (redis.UniversalClient, error) {
	rdb, err := newClient(c, t)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, redisError(c, err)
	}
	return rdb, nil
}

// redisError is err from c's Redis as one line naming it, password
// redacted, with a hint when the cause is known.
func redisError(c *config.Config, err error) error {
	msg, hint := rediserr.Explain(err, strings.HasPrefix(c.RedisURL, "rediss://"))
	if msg == "" {
		msg = "unreachable: " + err.Error()
		switch c.Topology() {
		case config.Sentinel:
			hint = "check redis_sentinels and redis_master, and that the Sentinels and the master run there"
		case config.Cluster:
			hint = "check redis_cluster and that the Cluster's nodes run there"
		default:
			hint = "check redis_url (or BATON_REDIS_URL) and that redis-server runs there"
		}
	}
	return &hintError{msg: redisAt(c) + msg, hint: hint, err: err}
}

// redisAt starts redisError's line: "redis at NAME: ".
func redisAt(c *config.Config) string { return "redis at " + c.RedisName() + ": " }

// connectLazy opens a client for c without checking that Redis answers:
// for a long-running reader (metrics --listen) that must start, and report
// Redis down, whatever Redis is doing.
func connectLazy(c *config.Config, pool int) (redis.UniversalClient, error) {
	return newClient(c, poolOpts(pool))
}

// clientOpts tune a client: its pool (per node on a Cluster), its dial
// timeout, its read and write timeouts (0: go-redis' 3s) and retries.
type clientOpts struct {
	pool     int
	minIdle  int // connections kept dialled ahead of need
	dial, io time.Duration
	retries  int
	// lean: the handshake is HELLO alone (RESP2: no maintenance-notification
	// handshake) and no CLIENT SETINFO, for a losing candidate whose whole
	// conversation with Redis is the handshake and one script.
	lean bool
	// ctxTimeout: a call's context deadline bounds its reads and writes
	// too (go-redis ContextTimeoutEnabled), so each call can wait as long
	// as its own use allows.
	ctxTimeout bool
}

// newClient is the one place a client for c's Redis is built: one server
// (redis_url), a Sentinel-watched master that it follows through failovers
// (redis_sentinels, redis_master), or a Cluster (redis_cluster).
func newClient(c *config.Config, t clientOpts) (redis.UniversalClient, error) {
	u, err := c.RedisOptions()
	if err != nil {
		return nil, err
	}
	switch c.Topology() {
	case config.Sentinel:
		o := u.Failover()
		o.PoolSize, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.MaxRetries = t.pool, t.dial, t.io, t.io, t.retries
		o.MinIdleConns, o.ContextTimeoutEnabled = t.minIdle, t.ctxTimeout
		if t.lean {
			o.Protocol, o.DisableIdentity = 2, true
		}
		return redis.NewFailoverClient(o), nil
	case config.Cluster:
		o := u.Cluster()
		o.PoolSize, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.MaxRetries = t.pool, t.dial, t.io, t.io, t.retries
		o.MinIdleConns, o.ContextTimeoutEnabled = t.minIdle, t.ctxTimeout
		if t.lean {
			o.Protocol, o.DisableIdentity = 2, true
		}
		return redis.NewClusterClient(o), nil
	}
	o, err := redis.ParseURL(c.RedisURL)
	if err != nil {
		return nil, &config.Error{Key: "redis_url", Msg: config.URLError(c.RedisURL, err)}
	}
	o.PoolSize, o.DialTimeout, o.MaxRetries, o.MinIdleConns = t.pool, t.dial, t.retries, t.minIdle
	o.ContextTimeoutEnabled = t.ctxTimeout
	if t.io > 0 {
		o.ReadTimeout, o.WriteTimeout = t.io, t.io
	}
	if t.lean {
		o.Protocol, o.DisableIdentity = 2, true
	}
	return redis.NewClient(o), nil
}

// loadAndConnect loads the config bound to cf and connects to its Redis.
func loadAndConnect(ctx context.Context, e *env, cf *config.Flags, pool int) (*config.Config, redis.UniversalClient, error) {
	cfg, err := cf.Load(e.Getenv)
	if err != nil {
		return nil, nil, err
	}
	rdb, err := connect(ctx, cfg, pool)
	return cfg, rdb, err
}
