package config

import (
	"strings"
	"testing"
)

func TestKeyCaps(t *testing.T) {
	c, err := load(t, "key_concurrency = 5\n[key_limits]\n\"tenant-42\" = 1\n\"big one\" = 50\n", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	caps := c.KeyCaps()
	if caps.Default != 5 || caps.Limits["tenant-42"] != 1 || caps.Limits["big one"] != 50 || len(caps.Limits) != 2 {
		t.Fatalf("caps %+v", caps)
	}
}

// Every bad key setting is refused with one line naming the key.
func TestBadKeyCaps(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"negative", "key_concurrency = -1\n", "key_concurrency: -1: must be between 0 (no cap) and 10000"},
		{"absurd", "key_concurrency = 1000000000\n", "key_concurrency: 1000000000: must be between 0 (no cap) and 10000"},
		{"limits without default", "[key_limits]\na = 1\n", "key_limits: set key_concurrency too"},
		{"limit zero", "key_concurrency = 2\n[key_limits]\na = 0\n", `key_limits: "a" = 0: must be between 1 and 10000`},
		{"limit absurd", "key_concurrency = 2\n[key_limits]\na = 99999999\n", `"a" = 99999999: must be between 1 and 10000`},
		{"brace", "key_concurrency = 2\n[key_limits]\n\"a{b\" = 1\n", `holds '{' or '}'`},
		{"newline", "key_concurrency = 2\n[key_limits]\n\"a\\nb\" = 1\n", "control character"},
		{"NUL", "key_concurrency = 2\n[key_limits]\n\"a\\u0000b\" = 1\n", "control character"},
		{"empty", "key_concurrency = 2\n[key_limits]\n\"\" = 1\n", "bad job key: empty"},
		{"long", "key_concurrency = 2\n[key_limits]\n\"" + strings.Repeat("k", 10000) + "\" = 1\n", "10000 bytes, at most 256"},
		{"not a number", "key_concurrency = 2\n[key_limits]\na = \"one\"\n", "key_limits"},
		{"unknown", "key_concurency = 2\n", "key_concurency"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.file, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") || len(err.Error()) > 400 {
				t.Fatalf("not one short line: %q", err)
			}
		})
	}
}
