package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// main runs Main in-process with a clean environment.
func mainT(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(context.Background(), args, Options{
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
		Getenv: func(string) string { return "" },
	})
	return out.String(), errb.String(), code
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "baton.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExitCodes(t *testing.T) {
	bad := writeConfig(t, "queue = \"q\"\nslots = 0\n")
	unknown := writeConfig(t, "queue = \"q\"\nslotz = 2\n")
	openDir := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(openDir, 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(openDir, 0o777)
	groupDir := filepath.Join(t.TempDir(), "group")
	if err := os.Mkdir(groupDir, 0o770); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(groupDir, 0o770)
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no args", nil, ExitUsage, "Usage:"},
		{"help", []string{"--help"}, ExitOK, ""},
		{"unknown command", []string{"nope"}, ExitUsage, `unknown command "nope"`},
		{"unknown flag", []string{"status", "--nope"}, ExitUsage, "unknown flag: --nope"},
		{"bad value", []string{"run", "--config", bad, "--", "/bin/true"}, ExitUsage, "baton: config " + bad + ":2: slots: 0: must be between 1 and 1024\n"},
		{"unknown key", []string{"status", "--config", unknown}, ExitUsage, ":2: slotz: unknown key"},
		{"missing config", []string{"enqueue", "--config", "/nonexistent.toml", "x"}, ExitUsage, "config /nonexistent.toml: no such file or directory"},
		{"bad duration flag", []string{"run", "--lifetime", "soon", "--", "/bin/true"}, ExitUsage, `invalid argument "soon"`},
		{"no command", []string{"run"}, ExitUsage, "hint: put the command after --"},
		{"unsafe lock dir", []string{"run", "--lock-dir", openDir, "--", "/bin/true"}, ExitUsage, "world-writable without the sticky bit"},
		{"group-writable lock dir", []string{"run", "--lock-dir", groupDir, "--", "/bin/true"}, ExitUsage, "group-writable without the sticky bit: the group's other users could replace lock files and records\nhint: chmod g-w " + groupDir},
		{"redis down", []string{"enqueue", "--redis-url", "redis://:pw@127.0.0.1:1/0", "x"}, ExitRuntime, "redis at redis://:xxxxx@127.0.0.1:1/0: connection refused"},
		{"unescaped password", []string{"enqueue", "--redis-url", "redis://:pa ss@127.0.0.1:1/0", "x"}, ExitUsage, "flag --redis-url: redis://:xxxxx@127.0.0.1:1/0: the password must be %-escaped"},
		{"version args", []string{"version", "x"}, ExitUsage, "takes no arguments"},
		{"status queue as argument", []string{"status", "thumbs"}, ExitUsage, "hint: the queue is a flag: baton status --queue thumbs"},
		{"metrics queue as argument", []string{"metrics", "thumbs"}, ExitUsage, `metrics: unexpected argument "thumbs"`},
		{"queues args", []string{"queues", "x"}, ExitUsage, `queues: unexpected argument "x"`},
		{"metrics bad listen", []string{"metrics", "--listen", "nonsense"}, ExitUsage, "metrics: --listen nonsense: address nonsense: missing port in address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := mainT(t, "", tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, stderr, tc.code, tc.stderr)
			}
			if strings.Contains(stderr, "pa ss") || strings.Contains(stderr, ":pw@") {
				t.Fatalf("password leaked: %q", stderr)
			}
			if code != ExitOK && tc.name != "no args" && strings.Count(stderr, "\n") > 2 {
				t.Fatalf("want one error line (and a hint), got %q", stderr)
			}
		})
	}
}

func TestHelpHasExamples(t *testing.T) {
	for _, c := range commands() {
		name := c.name
		out, _, code := mainT(t, "", name, "--help")
		if code != ExitOK || !strings.Contains(out, "Example") || !strings.Contains(out, "Usage: baton "+name) {
			t.Errorf("baton %s --help: exit %d\n%s", name, code, out)
		}
		// Prose fits a terminal; indented lines (flags, examples) may not.
		for _, line := range strings.Split(out, "\n") {
			if len(line) > 80 && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "Usage:") {
				t.Errorf("baton %s --help: a line of %d characters: %q", name, len(line), line)
			}
		}
	}
}
