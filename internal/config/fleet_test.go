package config

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestFleetKeys(t *testing.T) {
	c, err := load(t, "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if c.LockBackend != "file" || c.Host != host || c.LeaseTTL.D() != 15*time.Second || c.LeaseRenew.D() != 2*time.Second || c.MaxPerHost != 0 {
		t.Fatalf("fleet defaults: backend %q host %q ttl %s renew %s max_per_host %d", c.LockBackend, c.Host, c.LeaseTTL, c.LeaseRenew, c.MaxPerHost)
	}
	// host: file < env BATON_HOST < flag.
	file := "lock_backend = \"redis\"\nhost = \"file-host\"\n"
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, "file-host"},
		{nil, map[string]string{EnvHost: "pod-7"}, "pod-7"},
		{[]string{"--host", "flag-host"}, map[string]string{EnvHost: "pod-7"}, "flag-host"},
		{[]string{"--host", strings.Repeat("h", 253)}, nil, strings.Repeat("h", 253)},
	} {
		c, err := load(t, file, tc.args, tc.env)
		if err != nil {
			t.Fatal(err)
		}
		if c.Host != tc.want || c.LockBackend != "redis" {
			t.Errorf("args %v env %v: host %q backend %q, want %q", tc.args, tc.env, c.Host, c.LockBackend, tc.want)
		}
	}
}

func TestBadFleetConfig(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		args       []string
		env        map[string]string
		want       string
	}{
		{"backend", "lock_backend = \"etcd\"\n", nil, nil, `:1: lock_backend: "etcd": want file or redis`},
		{"host", "host = \"a b\"\n", nil, nil, `:1: host: "a b": use 1-253 letters`},
		{"host env", "", nil, map[string]string{EnvHost: "web/1"}, `env BATON_HOST: "web/1"`},
		{"long host", "", []string{"--host", strings.Repeat("h", 254)}, nil, "flag --host: \"hhh"},
		{"tiny ttl", "lease_ttl = \"10ms\"\n", nil, nil, ":1: lease_ttl: 10ms: must be at least 100ms"},
		{"renew past deadline", "lease_ttl = \"3s\"\nlease_renew = \"2s\"\n", nil, nil,
			":2: lease_renew: 2s: must be positive and below the renew deadline 2s (2/3 of lease_ttl 3s)"},
		{"renew flag", "", []string{"--lease-renew", "12s"}, nil, "flag --lease-renew: 12s: must be positive and below the renew deadline 10s (2/3 of lease_ttl 15s)"},
		{"zero renew", "lease_renew = \"0s\"\n", nil, nil, ":1: lease_renew: 0s:"},
		{"negative cap", "max_per_host = -1\n", nil, nil, ":1: max_per_host: -1: must be between 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.file, tc.args, tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
