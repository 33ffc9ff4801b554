package cli

import (
	"strings"
	"testing"

	"github.com/baton-run/baton/internal/redistest"
)

// TestRedisErrors: each way of failing to reach or write to Redis gets its
// own line, with the address redacted, and a hint; the exit code is 1.
func TestRedisErrors(t *testing.T) {
	plain := redistest.Start(t)
	pw := redistest.Start(t, redistest.Option{"--requirepass", "s3cret"})
	tlsOnly := redistest.StartTLS(t)
	replica := redistest.Start(t, redistest.Option{"--replicaof", "127.0.0.1", plain.Addr[strings.LastIndexByte(plain.Addr, ':')+1:]})
	full := redistest.Start(t, redistest.Option{"--maxmemory", "1"})
	for _, tc := range []struct {
		name, url, msg, hint string
	}{
		{"refused", "redis://:s3cret@127.0.0.1:1/0", "redis at redis://:xxxxx@127.0.0.1:1/0: connection refused", "start redis-server"},
		{"wrong password", "redis://:nope@" + pw.Addr + "/0", "redis at redis://:xxxxx@" + pw.Addr + "/0: wrong password or user (WRONGPASS)", "check the password"},
		{"no password", "redis://" + pw.Addr + "/0", "redis at redis://" + pw.Addr + "/0: password required (NOAUTH)", "BATON_REDIS_URL: redis://:PASSWORD@"},
		{"tls to plain", "rediss://:s3cret@" + plain.Addr + "/0", "redis at rediss://:xxxxx@" + plain.Addr + "/0: no TLS on this port", "use redis:// instead of rediss://"},
		{"plain to tls", "redis://" + tlsOnly.Addr + "/0", "redis at redis://" + tlsOnly.Addr + "/0: connection closed at once", "use rediss://"},
		{"no such db", "redis://" + plain.Addr + "/99", "redis at redis://" + plain.Addr + "/99: no such database", "'databases' setting"},
		{"replica", replica.URL(), "READONLY You can't write against a read only replica", "at the primary"},
		{"out of memory", full.URL(), "OOM command not allowed", "raise maxmemory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := mainT(t, "", "enqueue", "--redis-url", tc.url, "job")
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if code != ExitRuntime || len(lines) != 2 || !strings.Contains(lines[0], tc.msg) || !strings.HasPrefix(lines[1], "hint: ") || !strings.Contains(lines[1], tc.hint) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 1, %q and a hint with %q", code, stderr, tc.msg, tc.hint)
			}
			if strings.Contains(stderr, "s3cret") || strings.Contains(stderr, "nope") {
				t.Fatalf("password leaked: %s", stderr)
			}
		})
	}
}
