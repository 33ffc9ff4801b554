package cli

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseCrontab(t *testing.T) {
	src := `# m h dom mon dow command
SHELL=/bin/sh
MAILTO = ops@example.com
CRON_TZ=UTC

* * * * * baton run --config /etc/baton/a.toml -- /usr/bin/a
*/5 * * * * root /usr/local/bin/baton run -c /etc/baton/b.toml --spawn 2 -- /usr/bin/b arg
@hourly cd /srv && baton run --config=/etc/baton/c.toml --lifetime 50m -- ./c; echo done
@reboot baton run --config /etc/baton/a.toml -- /usr/bin/a
0 3 * * * /usr/bin/backup --baton run
* * * * * baton status --config /etc/baton/a.toml
1-59/2 * * * * baton run -c'/etc/baton/quoted dir/d.toml' -- d % stdin for d
* * * * * baton run -- /usr/bin/no-config
* * * *
`
	want := []cronLine{
		{Num: 6, Spec: "* * * * *", Config: "/etc/baton/a.toml", Bare: true},
		{Num: 7, Spec: "*/5 * * * *", Config: "/etc/baton/b.toml", Args: []string{"--spawn", "2"}},
		{Num: 8, Spec: "@hourly", Config: "/etc/baton/c.toml", Args: []string{"--lifetime", "50m"}, Bare: true},
		{Num: 12, Spec: "1-59/2 * * * *", Config: "/etc/baton/quoted dir/d.toml", Bare: true},
		{Num: 13, Spec: "* * * * *", Bare: true},
	}
	if got := parseCrontab([]byte(src)); !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", got, want)
	}
}

// TestCrontabPath: a bare 'baton' is flagged only while no PATH is set.
func TestCrontabPath(t *testing.T) {
	got := parseCrontab([]byte("* * * * * baton run -- a\nPATH=/usr/local/bin:/usr/bin:/bin\n* * * * * baton run -- b\n"))
	if len(got) != 2 || !got[0].Bare || got[1].Bare {
		t.Fatalf("got %+v", got)
	}
}

func TestShellWords(t *testing.T) {
	for in, want := range map[string][]string{
		`a b  c`:              {"a", "b", "c"},
		`a 'b c' "d e"`:       {"a", "b c", "d e"},
		`a\ b;c`:              {"a b", ";", "c"},
		`-c'/x y'`:            {"-c/x y"},
		`"it's" 'say "hi"'`:   {"it's", `say "hi"`},
		`unterminated 'quote`: {"unterminated", "quote"},
	} {
		if got := shellWords(in); !reflect.DeepEqual(got, want) {
			t.Errorf("shellWords(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSameConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.toml")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.toml")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		line, ours string
		want       bool
	}{
		{"", "", true}, {p, "", false}, {"", p, false}, {p, p, true},
		{dir + "/./a.toml", p, true}, {link, p, true}, {filepath.Join(dir, "b.toml"), p, false},
	} {
		if got := sameConfig(tc.line, tc.ours); got != tc.want {
			t.Errorf("sameConfig(%q, %q) = %v", tc.line, tc.ours, got)
		}
	}
}

// FuzzCrontab feeds arbitrary crontab text to the parser: it never panics,
// and every line it returns has a schedule of five fields or a descriptor.
func FuzzCrontab(f *testing.F) {
	for _, s := range []string{
		"* * * * * baton run --config /etc/b.toml -- x\n",
		"@hourly root baton run -c x -- y\n",
		"*/5 * * * * baton run --config='a b' --spawn=3 -- 'x' % y\n",
		"A=1\n# c\n\n* * * * *\n",
		"* * * * * sh -c \"baton run -c /x -- y\"\n",
		"\\\\\\ ' \" ; ; baton run -c",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		for _, l := range parseCrontab([]byte(src)) {
			if n := len(strings.Fields(l.Spec)); !(n == 5 || n == 1 && strings.HasPrefix(l.Spec, "@")) || l.Num < 1 {
				t.Fatalf("line %d: schedule %q", l.Num, l.Spec)
			}
		}
	})
}

// TestShippedCrontabs: the crontab lines in the README and crontab.example
// name baton by its full path, since cron's PATH is /usr/bin:/bin.
func TestShippedCrontabs(t *testing.T) {
	for _, name := range []string{"../README.md", "../crontab.example", "../docs/coverage.md", "../docs/design.md"} {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var cron []byte
		for _, line := range strings.Split(string(src), "\n") {
			if l := strings.TrimSpace(line); strings.HasPrefix(l, "* ") || strings.HasPrefix(l, "*/") || strings.HasPrefix(l, "@") {
				cron = append(cron, l+"\n"...)
			}
		}
		for _, l := range parseCrontab(cron) {
			if l.Bare {
				t.Errorf("%s: a crontab line runs a bare 'baton': %s", name, l.Spec)
			}
		}
		// A holder logs at info on the normal path: a shipped line either
		// sends stderr to a file or logs only warnings, so cron mails nothing.
		for _, line := range strings.Split(string(cron), "\n") {
			quiet := strings.Contains(line, "2>&1") && strings.Contains(line, ">>") ||
				strings.Contains(line, "--log-level warn") || strings.Contains(line, "--log-level error")
			if strings.Contains(line, "baton run") && !quiet {
				t.Errorf("%s: a crontab line would have cron mail a holder's info lines: %s", name, line)
			}
		}
	}
}
