package config

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Topology is how baton reaches Redis.
type Topology string

// The topologies: redis_url alone, redis_sentinels + redis_master, or
// redis_cluster.
const (
	Single   Topology = "single"
	Sentinel Topology = "sentinel"
	Cluster  Topology = "cluster"
)

// Topology is the topology c's keys describe (valid once Validate passed).
func (c *Config) Topology() Topology {
	switch {
	case len(c.RedisSentinels) > 0:
		return Sentinel
	case len(c.RedisCluster) > 0:
		return Cluster
	}
	return Single
}

// RedisName names c's Redis in logs and errors, password redacted:
// the URL, "master NAME via sentinels A,B" or "cluster A,B".
func (c *Config) RedisName() string {
	switch c.Topology() {
	case Sentinel:
		return "master " + c.RedisMaster + " via sentinels " + strings.Join(c.RedisSentinels, ",")
	case Cluster:
		return "cluster " + strings.Join(c.RedisCluster, ",")
	}
	return RedactURL(c.RedisURL)
}

// RedisTarget names the Redis database c's jobs live in, without user or
// password: "127.0.0.1:6379/0", "unix:/run/redis.sock/2", "sentinel
// mymaster@A,B/1", "cluster A,B". Slot records carry it, so that two
// deployments sharing one lock dir (production and staging, one queue name,
// two databases) are told apart instead of sharing slots.
func (c *Config) RedisTarget() string {
	db := 0
	if o, err := redis.ParseURL(c.RedisURL); err == nil {
		db = o.DB
	}
	sorted := func(a []string) string {
		a = slices.Clone(a)
		slices.Sort(a)
		return strings.Join(a, ",")
	}
	switch c.Topology() {
	case Sentinel:
		return "sentinel " + c.RedisMaster + "@" + sorted(c.RedisSentinels) + "/" + strconv.Itoa(db)
	case Cluster:
		return "cluster " + sorted(c.RedisCluster)
	}
	o, err := redis.ParseURL(c.RedisURL)
	if err != nil {
		return RedactURL(c.RedisURL)
	}
	if o.Network == "unix" {
		return "unix:" + o.Addr + "/" + strconv.Itoa(o.DB)
	}
	return o.Addr + "/" + strconv.Itoa(o.DB)
}

// RedisOptions are the go-redis options of c's Redis. For Sentinel and
// Cluster, redis_url gives the user, password, TLS (rediss://: each node
// is verified under its own address) and database of the data nodes; its
// host is not used. Sentinels are asked with redis_sentinel_password (and
// redis_sentinel_username), if set. Single is nil: redis.ParseURL(c.RedisURL)
// is the whole story.
func (c *Config) RedisOptions() (*redis.UniversalOptions, error) {
	t := c.Topology()
	if t == Single {
		return nil, nil
	}
	base, err := redis.ParseURL(c.RedisURL)
	if err != nil {
		return nil, &Error{Key: "redis_url", Msg: URLError(c.RedisURL, err)}
	}
	o := &redis.UniversalOptions{Username: base.Username, Password: base.Password, DB: base.DB}
	if base.TLSConfig != nil {
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if t == Sentinel {
		o.Addrs, o.MasterName = c.RedisSentinels, c.RedisMaster
		o.SentinelUsername, o.SentinelPassword = c.RedisSentinelUsername, c.RedisSentinelPassword
		return o, nil
	}
	o.Addrs, o.IsClusterMode = c.RedisCluster, true
	return o, nil
}

// validateTopology checks the Redis keys together: one topology, each
// address host:port, and a redis_url that only adds credentials to
// Sentinel or Cluster.
func (c *Config) validateTopology() error {
	bad := func(k, format string, a ...any) error { return &Error{Key: k, Msg: fmt.Sprintf(format, a...)} }
	sent, clus := len(c.RedisSentinels) > 0, len(c.RedisCluster) > 0
	switch {
	case sent && clus:
		return bad("redis_cluster", "%s and redis_sentinels %s: give one of them (Cluster or Sentinel)", strings.Join(c.RedisCluster, ","), strings.Join(c.RedisSentinels, ","))
	case sent && c.RedisMaster == "":
		return bad("redis_sentinels", "%s: needs redis_master, the name the Sentinels monitor (e.g. \"mymaster\")", strings.Join(c.RedisSentinels, ","))
	case !sent && c.RedisMaster != "":
		return bad("redis_master", "%q: needs redis_sentinels, the Sentinels' addresses (e.g. [\"10.0.0.1:26379\"])", c.RedisMaster)
	// The password itself is never part of a message.
	case !sent && c.RedisSentinelPassword != "":
		return bad("redis_sentinel_password", "given without redis_sentinels: redis_sentinel_password is the Sentinels' own password; give redis_sentinels and redis_master, or leave it out (the master's password goes in redis_url)")
	case !sent && c.RedisSentinelUsername != "":
		return bad("redis_sentinel_username", "%q without redis_sentinels: it is the Sentinels' ACL user; give redis_sentinels and redis_master, or leave it out", c.RedisSentinelUsername)
	case c.RedisSentinelUsername != "" && c.RedisSentinelPassword == "":
		return bad("redis_sentinel_username", "%q: needs redis_sentinel_password (or env %s)", c.RedisSentinelUsername, EnvSentinelPassword)
	}
	for _, k := range []struct {
		name  string
		addrs []string
	}{{"redis_sentinels", c.RedisSentinels}, {"redis_cluster", c.RedisCluster}} {
		for _, a := range k.addrs {
			if !hostPort(a) {
				return bad(k.name, "%q: want host:port, e.g. \"10.0.0.1:26379\"", a)
			}
		}
	}
	if !sent && !clus {
		return nil
	}
	other := "redis_sentinels"
	if clus {
		other = "redis_cluster"
	}
	u, err := url.Parse(c.RedisURL)
	if err != nil {
		return nil // the URL check names it
	}
	if u.Host != "" && c.RedisURL != Default().RedisURL {
		return bad("redis_url", "%s and %s: with %s, redis_url gives only the password, TLS and database: leave its host out (redis://:PASSWORD@/0)",
			RedactURL(c.RedisURL), other, other)
	}
	if clus {
		if o, err := redis.ParseURL(c.RedisURL); err == nil && o.DB != 0 {
			return bad("redis_url", "%s: database %d with redis_cluster: a Cluster has database 0 only", RedactURL(c.RedisURL), o.DB)
		}
	}
	return nil
}

// hostPort reports whether a is host:port with a port in 1-65535.
func hostPort(a string) bool {
	h, p, err := net.SplitHostPort(a)
	n, perr := strconv.Atoi(p)
	return err == nil && h != "" && perr == nil && n > 0 && n < 65536
}
