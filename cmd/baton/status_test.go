package main

import (
	"strings"
	"testing"

	"github.com/baton-run/baton/internal/redistest"
)

// TestStatusNamesRedisError: when Redis answers but refuses (a wrong or
// missing password, a database index out of range) or speaks the other
// protocol (TLS on one side only), status's table names that cause, as its
// error line on stderr does, not "redis unreachable"; exit 1.
func TestStatusNamesRedisError(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	pw := redistest.Start(t, redistest.Option{"--requirepass", "s3cret"})
	tlsOnly := redistest.StartTLS(t)
	plain := r.redis.Addr
	for _, tc := range []struct {
		name, url, cause string
		fleet            bool
	}{
		{"wrong password", "redis://:nope@" + pw.Addr + "/0", "wrong password or user (WRONGPASS)", false},
		{"no password", "redis://" + pw.Addr + "/0", "password required (NOAUTH)", false},
		{"no such db", "redis://" + plain + "/99", "no such database", false},
		{"tls to plain", "rediss://" + plain + "/0", "no TLS on this port", false},
		{"plain to tls", "redis://" + tlsOnly.Addr + "/0", "connection closed at once", false},
		{"fleet wrong password", "redis://:nope@" + pw.Addr + "/0", "wrong password or user (WRONGPASS)", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"status", "--redis-url", tc.url}
			if tc.fleet {
				args = append(args, "--lock-backend", "redis")
			}
			out, errOut, code := r.baton(args...)
			if code != 1 || !strings.Contains(errOut, tc.cause) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 and %q", code, errOut, tc.cause)
			}
			if strings.Contains(out, "unreachable") {
				t.Fatalf("the table says unreachable, want %q:\n%s", tc.cause, out)
			}
			line := "jobs  unknown ("
			if tc.fleet {
				line = "slots unknown ("
			}
			i := strings.Index(out, line)
			if i < 0 || !strings.Contains(strings.SplitN(out[i:], "\n", 2)[0], tc.cause) {
				t.Fatalf("want a line %q naming %q:\n%s", line, tc.cause, out)
			}
			if strings.Contains(out+errOut, "nope") {
				t.Fatalf("password leaked:\n%s%s", out, errOut)
			}
		})
	}
}
