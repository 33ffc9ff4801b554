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
		{Num: 6, Spec: "* * * * *", Config: "/etc/baton/a.toml"},
		{Num: 7, Spec: "*/5 * * * *", Config: "/etc/baton/b.toml", Flags: []string{"--spawn"}},
		{Num: 8, Spec: "@hourly", Config: "/etc/baton/c.toml", Flags: []string{"--lifetime"}},
		{Num: 12, Spec: "1-59/2 * * * *", Config: "/etc/baton/quoted dir/d.toml"},
		{Num: 13, Spec: "* * * * *"},
	}
	if got := parseCrontab([]byte(src)); !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", got, want)
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
