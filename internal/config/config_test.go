package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func load(t *testing.T, file string, args []string, env map[string]string) (*Config, error) {
	t.Helper()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	f := Bind(fs, All)
	if file != "" {
		p := filepath.Join(t.TempDir(), "baton.toml")
		if err := os.WriteFile(p, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"--config", p}, args...)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f.Load(func(k string) string { return env[k] })
}

func TestDefaults(t *testing.T) {
	c, err := load(t, "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Slots != 1 || c.StandbySlots != 1 || c.MinSlots != 1 || c.Queue != "default" || c.Lifetime.D() != 5*time.Minute {
		t.Fatalf("defaults: %+v", c)
	}
	if c.ScaleUpBacklog != 100 || c.ScaleUpAge.D() != 10*time.Second || c.ScaleUpEvery.D() != time.Second || c.IdleExit.D() != 30*time.Second {
		t.Fatalf("scaling defaults: %+v", c)
	}
}

func TestPrecedence(t *testing.T) {
	file := "queue = \"thumbs\"\nslots = 3\nlifetime = \"90s\"\nredis_url = \"redis://file:1/0\"\n"
	c, err := load(t, file, []string{"--slots", "4"}, map[string]string{EnvRedisURL: "redis://:pw@env:2/0"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Queue != "thumbs" || c.Slots != 4 || c.StandbySlots != 4 || c.MinSlots != 4 || c.Lifetime.D() != 90*time.Second || c.RedisURL != "redis://:pw@env:2/0" {
		t.Fatalf("got %+v", c)
	}
	c, err = load(t, file, []string{"--redis-url", "redis://flag:3/0", "--standby-slots", "0"}, map[string]string{EnvRedisURL: "redis://env:2/0"})
	if err != nil {
		t.Fatal(err)
	}
	if c.RedisURL != "redis://flag:3/0" || c.StandbySlots != 0 {
		t.Fatalf("flags must win: %+v", c)
	}
}

func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		args       []string
		want       string
	}{
		{"unknown key", "slots = 2\nslotz = 3\n", nil, ":2: slotz: unknown key"},
		{"flag spelling", "shutdown-grace = \"1s\"\n", nil, ":1: shutdown-grace: unknown key (did you mean shutdown_grace?)"},
		{"wrong type", "queue = \"q\"\nslots = \"two\"\n", nil, ":2: slots:"},
		{"bare number duration", "lifetime = 90\n", nil, ":1: lifetime:"},
		{"bad duration", "jitter = \"soon\"\n", nil, ":1: jitter:"},
		{"zero slots", "\nslots = 0\n", nil, ":2: slots: 0: must be between 1"},
		{"negative duration", "lifetime = \"1m\"\njitter = \"-1s\"\n", nil, ":2: jitter: -1s: must not be negative"},
		{"bad queue", "queue = \"a/b\"\n", nil, ":1: queue:"},
		{"long queue", "queue = \"" + strings.Repeat("q", 101) + "\"\n", nil, ":1: queue:"},
		{"bad schedule", "schedule = \"* * *\"\n", nil, ":1: schedule:"},
		{"bad url", "redis_url = \"http://:secret@x\"\n", nil, ":1: redis_url:"},
		{"flag named", "slots = 2\n", []string{"--slots", "0"}, "flag --slots: 0: must be between 1"},
		{"persistent not a bool", "persistent = \"yes\"\n", nil, `:1: persistent: want true or false, got string "yes"`},
		{"tiny heartbeat", "heartbeat_timeout = \"1ms\"\n", nil, ":1: heartbeat_timeout: 1ms: must be at least 100ms"},
		{"negative rss", "max_child_rss = -1\n", nil, ":1: max_child_rss: -1: must not be negative"},
		{"negative jobs per child", "", []string{"--max-jobs-per-child", "-2"}, "flag --max-jobs-per-child: -2: must not be negative"},
		{"syntax", "slots = = 2\n", nil, ":1:"},
		{"reject success", "reject_exit_codes = [65, 0]\n", nil, ":1: reject_exit_codes: 0: want exit statuses between 1 and 255"},
		{"reject flag", "", []string{"--reject-exit-codes", "65,300"}, "flag --reject-exit-codes: 300: want exit statuses"},
		{"min_slots above slots", "slots = 2\nmin_slots = 3\n", nil, ":2: min_slots: 3: must be between 1 and slots (2)"},
		{"min_slots zero", "slots = 2\n", []string{"--min-slots", "0"}, "flag --min-slots: 0: must be between 1 and slots (2)"},
		{"slots under min_slots", "min_slots = 2\n", nil, ":1: min_slots: 2: must be between 1 and slots (1)"},
		{"backlog zero", "scale_up_backlog = 0\n", nil, ":1: scale_up_backlog: 0: must be at least 1"},
		{"negative age", "scale_up_age = \"-1s\"\n", nil, ":1: scale_up_age: -1s: must not be negative"},
		{"tiny scale round", "", []string{"--scale-up-every", "10ms"}, "flag --scale-up-every: 10ms: must be at least 100ms"},
		{"tiny idle exit", "idle_exit = \"0s\"\n", nil, ":1: idle_exit: 0s: must be at least 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.file, tc.args, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("password leaked: %v", err)
			}
		})
	}
}

func TestMissingFile(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	f := Bind(fs, All)
	_ = fs.Parse([]string{"--config", "/nonexistent/baton.toml"})
	_, err := f.Load(func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "config /nonexistent/baton.toml: no such file") {
		t.Fatalf("err = %v", err)
	}
}

func TestVisibilityTimeout(t *testing.T) {
	_, err := load(t, "job_timeout = \"5m\"\nshutdown_grace = \"30s\"\nvisibility_timeout = \"5m\"\n", nil, nil)
	if err == nil || !strings.Contains(err.Error(), ":3: visibility_timeout: 5m0s: must exceed job_timeout + shutdown_grace (5m30s)") {
		t.Fatalf("err = %v", err)
	}
	if _, err := load(t, "visibility_timeout = \"0s\"\nlog_level = \"loud\"\n", nil, nil); err == nil || !strings.Contains(err.Error(), "log_level") {
		t.Fatalf("later keys must still be checked: %v", err)
	}
}

// TestRedactURL: passwords never show, in URLs that parse and in those that
// do not (spaces, '%', '@' and '/' in the password), nor in parse errors.
func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"redis://:s3cret@h:6379/0", "redis://:xxxxx@h:6379/0"},
		{"redis://user:s3cret@h:6379/0", "redis://user:xxxxx@h:6379/0"},
		{"redis://h:6379/0", "redis://h:6379/0"},
		{"redis://:pa ss@h:6379/0", "redis://:xxxxx@h:6379/0"},
		{"redis://:50%off@h:6379/0", "redis://:xxxxx@h:6379/0"},
		{"redis://:p@ss w/rd@h:6379/0", "redis://:xxxxx@h:6379/0"},
		{"redis://u:p@s%s@h:6379/0", "redis://u:xxxxx@h:6379/0"},
		{":pa ss@h:6379", ":xxxxx@h:6379"},
		{"redis://h:6379/0?password=s3cret&protocol=3", "redis://h:6379/0?password=xxxxx&protocol=3"},
	} {
		if got := RedactURL(tc.url); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
	for _, raw := range []string{"redis://:pa ss@h:6379/0", "redis://:50%off@h/0", "redis://:p@ss w/rd@h:6379/0", "redis://:se/cret@h:6379/0", "redis://:secret@h:6379/x"} {
		_, err := load(t, "", []string{"--redis-url", raw}, nil)
		if err == nil || !strings.Contains(err.Error(), "flag --redis-url: redis") {
			t.Fatalf("%s: err = %v", raw, err)
		}
		for _, secret := range []string{"pa ss", "50%off", "ss w", "cret", "secret"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("password leaked: %v", err)
			}
		}
		if strings.Contains(raw, " ") && !strings.Contains(err.Error(), "must be %-escaped (space %20") {
			t.Errorf("no escape hint: %v", err)
		}
	}
}

// TestTypeErrors: a value of the wrong type reads like the other config
// errors, "want T, got T2 V", for each kind of key.
func TestTypeErrors(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"queue = \"q\"\nslots = \"4\"\n", `:2: slots: want an integer, got string "4"`},
		{"slots = 2.5\n", `:1: slots: want an integer, got float 2.5`},
		{"queue = 4\n", `:1: queue: want a string, got integer 4`},
		{"log_level = true\n", `:1: log_level: want a string, got boolean true`},
		{"redis_url = [\"a\"]\n", `:1: redis_url: want a string, got an array`},
		{"lifetime = 90\n", `:1: lifetime: want a duration such as "90s" or "5m", got integer 90`},
		{"\njitter = \"soon\"\n", `:2: jitter: want a duration such as "90s" or "5m", got "soon"`},
		{"slots = 2\nspawn = \"x\"\nqueue = 1\n", `:2: spawn: want an integer, got string "x"`},
	} {
		_, err := load(t, tc.file, nil, nil)
		if err == nil || !strings.HasSuffix(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "config ") {
			t.Errorf("%q: err = %v, want it to end in %s", tc.file, err, tc.want)
		}
	}
}

// TestBindSubset: a command binds only some keys; the others still come
// from the file (and the defaults), and each bound flag names its group.
func TestBindSubset(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	f := Bind(fs, Connection, "max_payload")
	for _, name := range []string{"config", "queue", "redis-url", "max-payload"} {
		if fs.Lookup(name) == nil {
			t.Errorf("--%s not bound", name)
		}
	}
	if fs.Lookup("slots") != nil || fs.Lookup("log-format") != nil {
		t.Error("keys outside the selection are bound")
	}
	if g := fs.Lookup("max-payload").Annotations[GroupAnnotation]; len(g) != 1 || g[0] != Jobs {
		t.Errorf("max-payload group %v", g)
	}
	p := filepath.Join(t.TempDir(), "baton.toml")
	if err := os.WriteFile(p, []byte("slots = 3\nqueue = \"file\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--config", p, "--queue", "flag"}); err != nil {
		t.Fatal(err)
	}
	c, err := f.Load(func(string) string { return "" })
	if err != nil || c.Slots != 3 || c.StandbySlots != 3 || c.Queue != "flag" || c.Lifetime.D() != 5*time.Minute {
		t.Fatalf("got %+v, %v", c, err)
	}
}

func TestLongestQueueName(t *testing.T) {
	q := strings.Repeat("q", 100)
	c, err := load(t, "queue = \""+q+"\"\n", nil, nil)
	if err != nil {
		t.Fatalf("a queue name of 100 characters: %v", err)
	}
	if c.Queue != q {
		t.Fatalf("queue %q, want %q", c.Queue, q)
	}
}

// retention keeps no done jobs by default; a negative one, or a
// retention_max under 1, is refused with one line naming the key.
func TestRetention(t *testing.T) {
	c, err := load(t, "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Retention.D() != 0 || c.RetentionMax != 100000 {
		t.Fatalf("retention %s, retention_max %d; want 0 and 100000", c.Retention, c.RetentionMax)
	}
	c, err = load(t, "retention = \"1h\"\nretention_max = 5\n", nil, nil)
	if err != nil || c.Retention.D() != time.Hour || c.RetentionMax != 5 {
		t.Fatalf("retention %v, retention_max %v: %v", c.Retention, c.RetentionMax, err)
	}
	for _, tc := range []struct {
		name, file string
		args       []string
		want       string // after "config <file>:"
	}{
		{"negative", "retention = \"-1s\"\n", nil, "1: retention: -1s: must not be negative (0 keeps no done jobs)"},
		{"under a millisecond", "retention = \"10us\"\n", nil, "1: retention: 10µs: must be at least 1ms (0 keeps no done jobs)"},
		{"max zero", "retention = \"1h\"\nretention_max = 0\n", nil, "2: retention_max: 0: must be at least 1"},
		{"negative flag", "", []string{"--retention", "-5m"}, "flag --retention: -5m0s: must not be negative (0 keeps no done jobs)"},
		{"max flag", "", []string{"--retention-max", "-1"}, "flag --retention-max: -1: must be at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.file, tc.args, nil)
			if err == nil {
				t.Fatal("accepted")
			}
			got := err.Error()
			if tc.file != "" {
				_, got, _ = strings.Cut(got, ".toml:")
			}
			if got != tc.want {
				t.Fatalf("error %q, want %q", err, tc.want)
			}
		})
	}
}
