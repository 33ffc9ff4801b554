package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFleetStatusText: with lock_backend redis, `baton status` as text
// keeps its columns aligned when free rows come between held ones (FENCE
// starts under its header on every held row), and with jobs waiting and no
// run lease held it says so of the fleet, not of this host's lock dir.
func TestFleetStatusText(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	conf := filepath.Join(r.dir, "fleet.toml")
	if err := os.WriteFile(conf, []byte("lock_backend = \"redis\"\nslots = 2\nmin_slots = 1\nscale_up_age = \"0s\"\nscale_up_backlog = 1000\nstandby_slots = 2\nlease_ttl = \"6s\"\nlease_renew = \"500ms\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := r.baton("enqueue", "--config", conf, "a", "b"); code != 0 {
		t.Fatalf("enqueue exit %d: %s", code, errOut)
	}
	out, errOut, code := r.baton("status", "--config", conf)
	if code != 0 {
		t.Fatalf("status exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "2 jobs waiting or pending and no run lease held on any host") || strings.Contains(out, "no holder in") {
		t.Errorf("status with jobs waiting and no lease held:\n%s", out)
	}

	// h1 holds run-0 (one job running, the other waiting; min_slots = 1
	// keeps run-1 free), h2 a standby lease: its row follows run-1's free
	// row.
	job := r.script("job.sh", "cat >/dev/null; sleep 30\n")
	args := func(h string) []string {
		return r.fleetArgs(h, "--config", conf, "--concurrency", "1", "--poll-interval", "1m", "--standby-wait", "1m", "--lifetime", "1m", "--jitter", "0s", "--", job)
	}
	r.start(args("h1")...)
	eventually(t, 10*time.Second, "h1 holds a run lease", func() bool { return published(r.leases("default", 2)) == 1 })
	r.start(args("h2")...)
	var st struct{ Standby []slotJSON }
	eventually(t, 10*time.Second, "h2 holds a standby lease", func() bool { r.statusInto(&st, "--config", conf); return held(st.Standby) == 1 })
	out, errOut, code = r.baton("status", "--config", conf)
	if code != 0 {
		t.Fatalf("status exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "no run lease held") {
		t.Errorf("warns of no lease while h1 holds one:\n%s", out)
	}
	col, rows := -1, 0
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "SLOT"):
			col = strings.Index(l, "FENCE")
		case strings.Contains(l, " held "):
			rows++
			if col < 1 || len(l) <= col || l[col-1] != ' ' || l[col] < '1' || l[col] > '9' {
				t.Errorf("FENCE (column %d) not aligned in %q:\n%s", col, l, out)
			}
		}
	}
	if rows != 2 {
		t.Errorf("%d held rows, want 2:\n%s", rows, out)
	}
}

// TestFleetRedisUnreachable: with lock_backend redis and Redis down, a
// candidate exits 1 with the error naming Redis (password hidden) and a
// hint, as with flock slots; status exits 1 and says the slots are
// unknown rather than showing them free (they are leases in Redis).
func TestFleetRedisUnreachable(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	url := "redis://:hunter2@127.0.0.1:1/0"
	cmd := r.cmd(r.fleetArgs("h1", "--redis-url", url, "--log-format", "json", "--", "/bin/true")...)
	var errb strings.Builder
	cmd.Stderr = &errb
	_ = cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("run exit %d, want 1: %s", code, errb.String())
	}
	var line struct{ Level, Message, Hint string }
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &line) != nil || line.Level != "error" ||
		line.Message != "redis at redis://:xxxxx@127.0.0.1:1/0: connection refused" || line.Hint == "" ||
		strings.Contains(errb.String(), "hunter2") {
		t.Fatalf("run stderr %q", errb.String())
	}

	out, errOut, code := r.baton("status", "--lock-backend", "redis", "--redis-url", url)
	if code != 1 || !strings.Contains(out, "slots unknown") || strings.Contains(out, "free") {
		t.Errorf("status exit %d (want 1):\n%s%s", code, out, errOut)
	}
	out, _, code = r.baton("status", "--json", "--lock-backend", "redis", "--redis-url", url)
	var st struct {
		Run, Standby []slotJSON
		Error        string
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 1 || len(st.Run)+len(st.Standby) != 0 || st.Error == "" {
		t.Errorf("status --json exit %d (want 1, no slots, an error): %v\n%s", code, err, out)
	}
}
