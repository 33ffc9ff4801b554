package config

import (
	"strings"
	"testing"
)

// TestTopologies: redis_url alone is one server; redis_sentinels with
// redis_master is Sentinel, redis_cluster is a Cluster; redis_url then adds
// only the password, TLS and database.
func TestTopologies(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		args       []string
		env        map[string]string
		want       Topology
		check      func(t *testing.T, c *Config)
	}{
		{"single", "", nil, nil, Single, nil},
		{"sentinel", "redis_sentinels = [\"10.0.0.1:26379\", \"10.0.0.2:26379\"]\nredis_master = \"mymaster\"\n",
			nil, map[string]string{EnvRedisURL: "rediss://:s3cret@/2"}, Sentinel, func(t *testing.T, c *Config) {
				o, err := c.RedisOptions()
				if err != nil || o.MasterName != "mymaster" || len(o.Addrs) != 2 || o.Password != "s3cret" || o.DB != 2 || o.TLSConfig == nil || o.TLSConfig.ServerName != "" || o.SentinelPassword != "" {
					t.Fatalf("options %+v, %v", o, err)
				}
				if n := c.RedisName(); n != "master mymaster via sentinels 10.0.0.1:26379,10.0.0.2:26379" || strings.Contains(n, "s3cret") {
					t.Errorf("name %q", n)
				}
			}},
		{"sentinel flags", "", []string{"--redis-sentinels", "a:1,b:2", "--redis-master", "m"}, nil, Sentinel, nil},
		{"sentinel password", "redis_sentinels = [\"a:1\"]\nredis_master = \"m\"\nredis_sentinel_password = \"in-file\"\nredis_sentinel_username = \"watcher\"\n",
			nil, map[string]string{EnvRedisURL: "redis://:datapw@/0", EnvSentinelPassword: "from-env"}, Sentinel, func(t *testing.T, c *Config) {
				o, err := c.RedisOptions()
				if err != nil || o.SentinelPassword != "from-env" || o.SentinelUsername != "watcher" || o.Password != "datapw" {
					t.Fatalf("options %+v, %v: want the env's Sentinel password over the file's, the user, the master's password apart", o, err)
				}
				if n := c.RedisName(); strings.Contains(n, "from-env") {
					t.Errorf("name %q shows the Sentinels' password", n)
				}
			}},
		{"cluster", "redis_cluster = [\"10.0.0.1:7000\"]\nredis_url = \"redis://:pw@/0\"\n", nil, nil, Cluster, func(t *testing.T, c *Config) {
			o, err := c.RedisOptions()
			if err != nil || !o.IsClusterMode || o.Addrs[0] != "10.0.0.1:7000" || o.Password != "pw" {
				t.Fatalf("options %+v, %v", o, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(t, tc.file, tc.args, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if c.Topology() != tc.want {
				t.Fatalf("topology %s, want %s", c.Topology(), tc.want)
			}
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}

// TestBadTopology: each impossible combination is refused, naming both keys.
func TestBadTopology(t *testing.T) {
	sent := "redis_sentinels = [\"10.0.0.1:26379\"]\nredis_master = \"m\"\n"
	for _, tc := range []struct {
		name, file string
		args       []string
		env        map[string]string
		want       string
	}{
		{"both", sent + "redis_cluster = [\"10.0.0.1:7000\"]\n", nil, nil, ":3: redis_cluster: 10.0.0.1:7000 and redis_sentinels 10.0.0.1:26379: give one of them"},
		{"no master", "redis_sentinels = [\"10.0.0.1:26379\"]\n", nil, nil, ":1: redis_sentinels: 10.0.0.1:26379: needs redis_master"},
		{"master alone", "redis_master = \"m\"\n", nil, nil, `:1: redis_master: "m": needs redis_sentinels`},
		{"bad address", "redis_sentinels = [\"10.0.0.1\"]\nredis_master = \"m\"\n", nil, nil, `:1: redis_sentinels: "10.0.0.1": want host:port`},
		{"bad port", "redis_cluster = [\"h:99999\"]\n", nil, nil, `:1: redis_cluster: "h:99999": want host:port`},
		{"not strings", "redis_cluster = [7000]\n", nil, nil, `:1: redis_cluster: want an array of strings such as ["10.0.0.1:26379"], got an element integer 7000`},
		{"url host", sent, nil, map[string]string{EnvRedisURL: "redis://:pw@10.0.0.9:6379/0"}, "env BATON_REDIS_URL: redis://:xxxxx@10.0.0.9:6379/0 and redis_sentinels: with redis_sentinels, redis_url gives only the password, TLS and database"},
		{"url host flag", "redis_cluster = [\"h:1\"]\n", []string{"--redis-url", "redis://h:2/0"}, nil, "flag --redis-url: redis://h:2/0 and redis_cluster:"},
		{"cluster db", "redis_cluster = [\"h:1\"]\nredis_url = \"redis:///3\"\n", nil, nil, ":2: redis_url: redis:///3: database 3 with redis_cluster: a Cluster has database 0 only"},
		{"sentinel password alone", "redis_sentinel_password = \"hunter2\"\n", nil, nil, ":1: redis_sentinel_password: given without redis_sentinels: redis_sentinel_password is"},
		{"sentinel password env alone", "", nil, map[string]string{EnvSentinelPassword: "hunter2"}, "env BATON_REDIS_SENTINEL_PASSWORD: given without redis_sentinels: redis_sentinel_password is"},
		{"sentinel password flag alone", "", []string{"--redis-sentinel-password", "hunter2"}, nil, "flag --redis-sentinel-password: given without redis_sentinels: redis_sentinel_password is"},
		{"sentinel user alone", "redis_sentinel_username = \"u\"\n", nil, nil, `:1: redis_sentinel_username: "u" without redis_sentinels`},
		{"sentinel user without password", sent + "redis_sentinel_username = \"u\"\n", nil, nil, `:3: redis_sentinel_username: "u": needs redis_sentinel_password`},
		{"wait on cluster", "redis_cluster = [\"h:1\"]\nenqueue_wait_replicas = 1\n", nil, nil, ":2: enqueue_wait_replicas: 1 with redis_cluster: not supported"},
		{"wait negative", "enqueue_wait_replicas = -1\n", nil, nil, ":1: enqueue_wait_replicas: -1: must be between 0 (off) and 64"},
		{"wait timeout", "enqueue_wait_timeout = \"0s\"\n", nil, nil, ":1: enqueue_wait_timeout: 0s: must be at least 1ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.file, tc.args, tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("err = %v shows the password", err)
			}
		})
	}
}

// TestRedisTarget: the target names the server and database, one way for
// every spelling of them, and never the credentials.
func TestRedisTarget(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{RedisURL: "redis://127.0.0.1:6379/0"}, "127.0.0.1:6379/0"},
		{Config{RedisURL: "redis://127.0.0.1:6379"}, "127.0.0.1:6379/0"},
		{Config{RedisURL: "redis://127.0.0.1"}, "127.0.0.1:6379/0"},
		{Config{RedisURL: "redis://user:s3cret@127.0.0.1:6380/2"}, "127.0.0.1:6380/2"},
		{Config{RedisURL: "rediss://:s3cret@10.0.0.1:6380/3"}, "10.0.0.1:6380/3"},
		{Config{RedisURL: "unix://:s3cret@/run/redis.sock?db=4"}, "unix:/run/redis.sock/4"},
		{Config{RedisURL: "redis://:s3cret@/1", RedisSentinels: []string{"b:26379", "a:26379"}, RedisMaster: "m"}, "sentinel m@a:26379,b:26379/1"},
		{Config{RedisURL: "redis://:s3cret@/0", RedisCluster: []string{"b:7000", "a:7000"}}, "cluster a:7000,b:7000"},
	} {
		got := tc.cfg.RedisTarget()
		if got != tc.want || strings.Contains(got, "s3cret") {
			t.Errorf("RedisTarget(%s) = %q, want %q", tc.cfg.RedisURL, got, tc.want)
		}
	}
}
