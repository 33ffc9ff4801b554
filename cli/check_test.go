package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/proc"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/work"
)

// checkT runs baton check with a private lock dir and returns its output.
func checkT(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return mainT(t, "", append([]string{"check", "--lock-dir", filepath.Join(t.TempDir(), "locks")}, args...)...)
}

func checkJSON(t *testing.T, args ...string) (checkReport, int) {
	t.Helper()
	out, stderr, code := checkT(t, append(args, "--json")...)
	var rep checkReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON (%v): %s\nstderr: %s", err, out, stderr)
	}
	return rep, code
}

func status(rep checkReport, name string) string {
	for _, r := range rep.Relations {
		if r.Name == name {
			return r.Status.String()
		}
	}
	return "missing"
}

func TestCheckExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config string
		args   []string
		code   int
		stdout []string
		stderr string
	}{
		{"defaults pass", "", nil, 0,
			[]string{"standby-slots", "1 ≥ 1", "Every relation holds: k holders at all times"}, ""},
		{"crontab.example passes", "slots = 4\nstandby_slots = 4\nspawn = 2\nlifetime = \"5m\"\njitter = \"1m\"\nstandby_wait = \"15m\"\n", nil, 0,
			[]string{"4 ≥ 4", "15m ≥ 2·6m32s", "Every relation holds: k holders at all times"}, ""},
		{"standby gives up too soon", "standby_wait = \"4m\"\njitter = \"70s\"\n", nil, 1,
			[]string{"FAIL standby-outwaits-lifetime:", "fix: raise standby_wait to at least 6m10s\n"},
			"baton: check: 3 of 11 relations fail\n"},
		{"hourly cron", "schedule = \"@hourly\"\n", nil, 1,
			[]string{"cron firings", "fix: raise lifetime to at least 1h0m2s, or fire more often: schedule '*/4 * * * *'"},
			"relations fail"},
		{"office hours", "schedule = \"0 9-17 * * 1-5\"\nstandby_slots = 2\n", nil, 1,
			[]string{"64h", "cron-beats-lifetime"}, "relations fail"},
		{"fewer standby slots than run slots", "slots = 4\nstandby_slots = 2\n", nil, 1,
			[]string{"N_s ≥ k", "2 ≥ 4", "2 run slots empty", "fix: raise standby_slots to 4"}, "1 of 11 relations fail"},
		{"flags override the file", "slots = 4\nstandby_slots = 2\n", []string{"--standby-slots", "4"}, 0, nil, ""},
		{"min_slots: coverage for k", "slots = 4\nmin_slots = 2\nstandby_slots = 2\n", nil, 0,
			[]string{"min_slots, default slots)  2", "2 ≥ 2", "Scaling: coverage is proven for k = min_slots = 2 of slots = 4: cron and the standbys keep run-0 to run-1 covered"}, ""},
		{"slow poll: a warning", "", []string{"--poll-interval", "5s"}, 0,
			[]string{"WARN poll-interval:", "cannot be watched", "fix: lower poll_interval to 2.727s", "Every relation holds, with 1 warning."}, ""},
		{"invalid config", "slots = 0\n", nil, 2, nil, ":1: slots: 0: must be between 1 and 1024"},
		{"schedule that never fires", "schedule = \"0 0 30 2 *\"\n", nil, 2, nil, "schedule: schedule \"0 0 30 2 *\": never fires"},
		{"@every: C is its period", "schedule = \"@every 30s\"\n", nil, 0,
			[]string{`schedule "@every 30s", from config key schedule`, "longest gap between cron firings                      30s", "1·9 = 9 ≥ 1"}, ""},
		{"@every in fractions of a second", "schedule = \"@every 1500ms\"\n", nil, 2, nil, "@every takes whole seconds, at least 1s"},
		{"stray argument", "", []string{"extra"}, 2, nil, `unexpected argument "extra"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.config != "" {
				args = append([]string{"--config", writeConfig(t, tc.config)}, args...)
			}
			stdout, stderr, code := checkT(t, args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("exit %d, stderr %q; want %d, %q\n%s", code, stderr, tc.code, tc.stderr, stdout)
			}
			if tc.code == 2 && (stdout != "" || !strings.HasPrefix(stderr, "baton: ") || strings.Count(stderr, "\n") > 2) {
				t.Fatalf("an invalid config prints one line on stderr (and maybe a hint), nothing else: %q %q", stdout, stderr)
			}
			for _, want := range tc.stdout {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
		})
	}
}

func TestCheckJSON(t *testing.T) {
	rep, code := checkJSON(t, "--slots", "3", "--standby-slots", "4", "--spawn", "1")
	if code != 0 || rep.Failed != 0 || rep.Warnings != 0 || rep.Queue != "default" || len(rep.Schedule) != 1 || rep.Source != "config key schedule" {
		t.Fatalf("exit %d: %+v", code, rep)
	}
	if len(rep.Relations) != 11 || len(rep.Quantities) != 11 || rep.Quantities[0].Symbol != "C" || rep.Quantities[0].Value != "1m" {
		t.Fatalf("relations %d quantities %+v", len(rep.Relations), rep.Quantities)
	}
	raw, _, _ := checkT(t, "--json", "--standby-wait", "1m")
	for _, want := range []string{`"status": "FAIL"`, `"fix": "raise standby_wait to at least 6m"`, `"failed": 3`} {
		if !strings.Contains(raw, want) {
			t.Errorf("json lacks %s", want)
		}
	}
}

func TestCheckCrontab(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, "queue = \"thumbs\"\nslots = 4\nstandby_slots = 6\nlifetime = \"3m\"\njitter = \"30s\"\nstandby_wait = \"9m\"\n")
	other := writeConfig(t, "queue = \"mail\"\n")
	crontab := func(body string) string {
		p := filepath.Join(dir, "crontab"+strconv.Itoa(len(body)))
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// One line: 1 candidate a minute is too few for 4 slots of 3 minutes.
	one := crontab("MAILTO=ops\n# thumbnails\n* * * * * baton run --config " + cfg + " -- /usr/bin/thumb\n")
	rep, code := checkJSON(t, "--config", cfg, "--crontab", one)
	if code != 1 || status(rep, "replenishment") != "FAIL" || rep.Source != "crontab "+one+" (1 line)" {
		t.Fatalf("exit %d, replenishment %s, source %q", code, status(rep, "replenishment"), rep.Source)
	}
	// Two lines with the same config add up; a line for another config, and
	// /etc/cron.d's user field, are handled.
	two := crontab("* * * * * root /usr/local/bin/baton run --config=" + cfg + " -- /usr/bin/thumb\n" +
		"* * * * * root baton run -c " + cfg + " -- /usr/bin/thumb >/dev/null 2>&1\n" +
		"*/5 * * * * root baton run --config " + other + " -- /usr/bin/mail\n" +
		"@reboot root baton run --config " + cfg + " -- /usr/bin/thumb\n")
	rep, code = checkJSON(t, "--config", cfg, "--crontab", two)
	if code != 0 || len(rep.Schedule) != 2 || rep.Quantities[1].Value != "2" {
		t.Fatalf("exit %d, schedule %v, m %v: %+v", code, rep.Schedule, rep.Quantities[1], rep.Relations)
	}
	// Flags on the line override the file, as for run (spawn 2 makes
	// replenishment pass); check's own flags override the line. Lines with
	// different flags, and a bare 'baton' under cron's PATH, are warnings.
	flagged := crontab("* * * * * /usr/local/bin/baton run --config " + cfg + " --spawn 2 --lifetime=5m -- /usr/bin/thumb\n" +
		"* * * * * baton run --config " + cfg + " -- /usr/bin/thumb\n")
	rep, _ = checkJSON(t, "--config", cfg, "--crontab", flagged)
	if status(rep, "crontab-flags") != "WARN" || status(rep, "crontab-path") != "WARN" ||
		rep.Quantities[1].Value != "4" || rep.Quantities[4].Value != "5m" {
		t.Fatalf("flags on the line: %+v\n%+v", rep.Quantities, rep.Relations)
	}
	rep, _ = checkJSON(t, "--config", cfg, "--crontab", flagged, "--lifetime", "4m")
	if rep.Quantities[4].Value != "4m" {
		t.Fatalf("check's flags must win: %+v", rep.Quantities)
	}
	out, stderr, code := checkT(t, "--config", cfg, "--crontab", crontab("* * * * * /usr/local/bin/baton run --config "+cfg+" --slots 0 -- x\n"))
	if code != 2 || !strings.Contains(stderr, "line 1: flag --slots: 0: must be between 1") {
		t.Fatalf("bad flag on the line: exit %d %s%s", code, out, stderr)
	}
	// - reads the crontab from standard input.
	out, stderr, code = mainT(t, "* * * * * /usr/local/bin/baton run --config "+cfg+" --spawn 3 -- /usr/bin/thumb\n",
		"check", "--lock-dir", filepath.Join(dir, "locks"), "--config", cfg, "--crontab", "-", "--json")
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Source != "crontab - (1 line)" || rep.Quantities[1].Value != "3" || status(rep, "crontab-path") != "missing" {
		t.Fatalf("stdin: exit %d %s %s", code, out, stderr)
	}
	// No line for this config: exit 2, naming the lines that run baton.
	_, stderr, code = checkT(t, "--config", cfg, "--crontab", crontab("*/5 * * * * baton run --config "+other+" -- x\n"))
	if code != 2 || !strings.Contains(stderr, "no line runs 'baton run' with --config "+cfg) || !strings.Contains(stderr, "line 1") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	_, stderr, code = checkT(t, "--config", cfg, "--crontab", filepath.Join(dir, "missing"))
	if code != 1 || !strings.Contains(stderr, "read crontab") {
		t.Fatalf("missing crontab: exit %d %s", code, stderr)
	}
}

func TestCheckLockDir(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(open, 0o777)
	for _, tc := range []struct {
		dir, status, why string
	}{
		{filepath.Join(base, "new", "locks"), "PASS", ""},
		{base, "PASS", ""},
		{file, "FAIL", "not a directory"},
		{filepath.Join(file, "locks", "q"), "FAIL", "it cannot be created: " + file + " is not a directory"},
		{open, "FAIL", "world-writable without the sticky bit"},
	} {
		r := checkLockDir(tc.dir)
		if r.Status.String() != tc.status || !strings.Contains(r.Why, tc.why) {
			t.Errorf("%s: %s %q, want %s %q", tc.dir, r.Status, r.Why, tc.status, tc.why)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "new")); !os.IsNotExist(err) {
		t.Fatal("check created the lock dir")
	}
}

// TestCheckRecordedSlots lowers slots under a lock dir that has more run slot
// files, one of them held; check warns and names it, and touches nothing.
func TestCheckRecordedSlots(t *testing.T) {
	dir := t.TempDir()
	set, err := lock.NewFileSet(dir, "q", lock.RoleRun, 4)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if err := os.WriteFile(set.Path(i), nil, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	start, err := proc.StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(lock.Record{Slot: 3, Held: true, PID: os.Getpid(), Start: start, Role: lock.RoleRun, Since: time.Now()})
	if err := os.WriteFile(set.Path(3)+".json", rec, 0o644); err != nil {
		t.Fatal(err)
	}
	before := listDir(t, dir)
	r := checkRecordedSlots(dir, "q", 2)
	if r.Status.String() != "WARN" || !strings.Contains(r.Why, "up to q.run.3") || !strings.Contains(r.Why, "still held: run.3 (pid ") {
		t.Fatalf("%+v", r)
	}
	if r := checkRecordedSlots(dir, "q", 4); r.Status.String() != "PASS" || r.Values != "4 ≤ 4" {
		t.Fatalf("%+v", r)
	}
	if _, _, code := mainT(t, "", "check", "--lock-dir", dir, "--queue", "q", "--standby-slots", "2"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if after := listDir(t, dir); strings.Join(before, " ") != strings.Join(after, " ") {
		t.Fatalf("check changed the lock dir: %v → %v", before, after)
	}
	// Nothing is locked: every slot is still free to take (from a random one).
	for i := 0; i < 4; i++ {
		sl, ok, err := set.TryAcquire()
		if !ok || err != nil {
			t.Fatalf("slot %d of 4 after check: %v %v", i, ok, err)
		}
		defer sl.Release()
	}
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		fi, _ := e.Info()
		names = append(names, e.Name()+"@"+fi.ModTime().String())
	}
	sort.Strings(names)
	return names
}

func TestCheckOnline(t *testing.T) {
	srv := redistest.Start(t)
	rep, code := checkJSON(t, "--standby-slots", "2", "--online", "--redis-url", srv.URL())
	if code != 0 || status(rep, "redis-reachable") != "PASS" || status(rep, "redis-version") != "PASS" || status(rep, "redis-group") != "WARN" {
		t.Fatalf("exit %d: %+v", code, rep.Relations)
	}
	if err := work.Prepare(context.Background(), srv.Client(), work.KeysFor("default")); err != nil {
		t.Fatal(err)
	}
	if rep, _ := checkJSON(t, "--online", "--redis-url", srv.URL()); status(rep, "redis-group") != "PASS" {
		t.Fatalf("group: %s", status(rep, "redis-group"))
	}
	rep, code = checkJSON(t, "--online", "--redis-url", "redis://:secret@127.0.0.1:1/0")
	if code != 1 || status(rep, "redis-reachable") != "FAIL" {
		t.Fatalf("unreachable: exit %d %+v", code, rep.Relations)
	}
	out, _, _ := checkT(t, "--online", "--redis-url", "redis://:secret@127.0.0.1:1/0")
	if strings.Contains(out, "secret") {
		t.Fatal("password printed")
	}
}

func TestRedisVersion(t *testing.T) {
	for v, want := range map[string]bool{"7.0.15": true, "6.2.0": true, "6.0.16": false, "10.1": true, "5": false, "": false, "x.y": false} {
		if got := atLeast(v, minRedis); got != want {
			t.Errorf("atLeast(%q) = %v", v, got)
		}
	}
	if v := infoField("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", "redis_version"); v != "7.0.15" {
		t.Errorf("infoField = %q", v)
	}
}

// FuzzCheckConfig runs check on arbitrary config files: it never panics,
// exits 0, 1 or 2, and exits 2 exactly when the config does not load.
func FuzzCheckConfig(f *testing.F) {
	for _, s := range []string{
		"", "slots = 4\nspawn = 4\n", "schedule = \"0 0 29 2 *\"\n", "schedule = \"*/7 * * * *\"\nlifetime = \"20m\"\n",
		"standby_wait = \"1s\"\n", "slots = 0\n", "lifetime = 90\n", "schedule = \"@every 5m\"\n", "jitter = \"-1s\"\n",
		"queue = \"a b\"\n", "standby_slots = 0\nvisibility_timeout = \"0s\"\n", "max_jobs = 10\npoll_interval = \"10ms\"\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		p := filepath.Join(t.TempDir(), "baton.toml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := mainT(t, "", "check", "--config", p, "--lock-dir", filepath.Join(t.TempDir(), "l"), "--json")
		switch code {
		case 0, 1:
			var rep checkReport
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil || (rep.Failed > 0) != (code == 1) {
				t.Fatalf("exit %d, output %q: %v", code, stdout, err)
			}
		case 2:
			if stdout != "" || !strings.HasPrefix(stderr, "baton: ") {
				t.Fatalf("exit 2 with stdout %q stderr %q", stdout, stderr)
			}
		default:
			t.Fatalf("exit %d: %s", code, stderr)
		}
	})
}

func TestCheckQuantities(t *testing.T) {
	for _, tc := range []struct {
		schedule string
		c, m     string
	}{
		{"@hourly", "1h", "1"},
		{"0 9-17 * * 1-5", "64h", "1"},
		{"*/7 * * * *", "7m", "1"},
		{"0 0 29 2 *", "70104h", "1"},
	} {
		t.Run(tc.schedule, func(t *testing.T) {
			rep, _ := checkJSON(t, "--schedule", tc.schedule)
			got := map[string]string{}
			for _, q := range rep.Quantities {
				got[q.Symbol] = q.Value
			}
			if got["C"] != tc.c || got["m"] != tc.m || got["H"] != "6m32s" {
				t.Fatalf("quantities %v", got)
			}
		})
	}
}

// TestCheckCombinedFix: when several relations fail, check proposes one
// combined fix, and check passes with it.
func TestCheckCombinedFix(t *testing.T) {
	for _, body := range []string{
		"slots = 4\nlifetime = \"50s\"\nstandby_wait = \"1m\"\nstandby_slots = 1\n",
		"schedule = \"*/10 * * * *\"\nslots = 3\njitter = \"5m\"\n",
		"slots = 8\nlifetime = \"2m\"\nspawn = 2\nshutdown_grace = \"3m\"\n",
	} {
		cfg := writeConfig(t, body)
		rep, code := checkJSON(t, "--config", cfg)
		if code != 1 || len(rep.CombinedFix) == 0 {
			t.Fatalf("%q: exit %d, combined fix %v", body, code, rep.CombinedFix)
		}
		args := []string{"--config", cfg}
		for _, c := range rep.CombinedFix {
			args = append(args, "--"+strings.ReplaceAll(c.Key, "_", "-"), c.Value)
		}
		out, _, code := checkT(t, args...)
		if code != 0 {
			t.Errorf("%q with %v: exit %d\n%s", body, rep.CombinedFix, code, out)
		}
	}
	cfg := writeConfig(t, "slots = 4\nlifetime = \"50s\"\nstandby_wait = \"1m\"\n")
	out, _, _ := checkT(t, "--config", cfg)
	if !strings.Contains(out, "Together, with every relation holding:\n  lifetime = ") || !strings.Contains(out, "(to try it: baton check ... --lifetime ") {
		t.Fatalf("no combined fix in\n%s", out)
	}
}
