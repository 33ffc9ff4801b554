package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/cronfire"
)

// Every candidate marks cron's firing on its host (a losing one too, without
// Redis), the holder publishes it, and status warns about a host that has
// not fired for more than 2C + 4s, with a cron line per host; metrics show
// every host's last firing; periodic forget-host forgets a retired host.
func TestCronSilence(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	h := r.start("run", "--host", "here", "--slots", "1", "--standby-slots", "0", "--", "true")
	eventually(t, 10*time.Second, "the holder publishes its start", func() bool {
		return r.client().HGet(context.Background(), cronfire.Key("default"), "here").Val() != ""
	})
	before := time.Now()
	if _, errOut, code := r.baton("run", "--host", "here", "--slots", "1", "--standby-slots", "0", "--", "true"); code != 0 {
		t.Fatalf("losing candidate: exit %d %s", code, errOut)
	}
	eventually(t, 20*time.Second, "the holder publishes the losing candidate's firing", func() bool {
		ms, _ := strconv.ParseInt(r.client().HGet(context.Background(), cronfire.Key("default"), "here").Val(), 10, 64)
		return ms >= before.Add(-time.Second).UnixMilli() // the file's mtime may round down
	})
	gone := time.Now().Add(-10 * time.Minute)
	if err := r.client().HSet(context.Background(), cronfire.Key("default"), "gone", gone.UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	stdout, errOut, code := r.baton("status")
	if code != 0 || !strings.Contains(stdout, "warning: cron has not started baton on host gone since "+gone.Format(time.RFC3339)) ||
		strings.Contains(stdout, "on host here since") {
		t.Fatalf("status: exit %d\n%s%s", code, stdout, errOut)
	}
	cronLine := regexp.MustCompile(`\ncron     gone: started baton at ` + regexp.QuoteMeta(gone.Format(time.RFC3339)) + `, 10m\d+s ago: SILENT, more than 2m4s\n`)
	if !cronLine.MatchString(stdout) ||
		!strings.Contains(stdout, "\n         here: started baton at ") || !strings.Contains(stdout, "baton periodic forget-host gone") {
		t.Fatalf("status shows no cron line per host:\n%s", stdout)
	}
	stdout, errOut, code = r.baton("metrics")
	if code != 0 || !strings.Contains(stdout, `baton_cron_last_fire_timestamp_seconds{host="gone",queue="default"}`) ||
		!strings.Contains(stdout, `baton_cron_last_fire_timestamp_seconds{host="here",queue="default"}`) {
		t.Fatalf("metrics: exit %d\n%s%s", code, stdout, errOut)
	}

	// A host taken out of service is forgotten; a typo is an error.
	stdout, errOut, code = r.baton("periodic", "forget-host", "gone", "nosuch")
	if code != 1 || !strings.Contains(stdout, "forgot host gone in queue default (cron last started baton there at "+gone.Format(time.RFC3339)) ||
		!strings.Contains(errOut, "queue default has no cron firing of host nosuch (a typo?); hosts recorded: gone, here") {
		t.Fatalf("forget-host gone nosuch: exit %d\n%s%s", code, stdout, errOut)
	}
	if _, errOut, code = r.baton("periodic", "forget-host"); code != 2 || !strings.Contains(errOut, "which host?") {
		t.Fatalf("forget-host without a host: exit %d %s", code, errOut)
	}
	stdout, errOut, code = r.baton("status")
	if code != 0 || strings.Contains(stdout, "gone") || !strings.Contains(stdout, "\ncron     here: started baton at ") {
		t.Fatalf("status after forget-host: exit %d\n%s%s", code, stdout, errOut)
	}
	if stdout, _, _ = r.baton("metrics"); strings.Contains(stdout, `host="gone"`) {
		t.Fatalf("metrics after forget-host still show host gone:\n%s", stdout)
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	h.wait(t, 20*time.Second)
}

// In fleet mode a host whose candidates hold no slot still publishes its
// firings: its losing candidates talk to Redis anyway.
func TestCronFiringFleetLoser(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	h := r.start(r.fleetArgs("a", "--slots", "1", "--standby-slots", "0", "--", "true")...)
	eventually(t, 10*time.Second, "host a holds the lease", func() bool { return published(r.leases("default", 1)) == 1 })
	if _, errOut, code := r.baton(r.fleetArgs("b", "--slots", "1", "--standby-slots", "0", "--", "true")...); code != 0 {
		t.Fatalf("losing candidate on b: exit %d %s", code, errOut)
	}
	if v := r.client().HGet(context.Background(), cronfire.Key("default"), "b").Val(); v == "" {
		t.Fatal("host b's firing was not published")
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	h.wait(t, 20*time.Second)
}

// cronStatus is the cron part of `status --json`.
type cronStatus struct {
	CronFires       []cronfire.Fire `json:"cron_fires"`
	CronSilentAfter time.Duration   `json:"cron_silent_after"`
}

func (c cronStatus) fire(host string) (cronfire.Fire, bool) {
	for _, f := range c.CronFires {
		if f.Host == host {
			return f, true
		}
	}
	return cronfire.Fire{}, false
}

// With schedule = "@every 1s" (a systemd timer's, a test's) C is 1 s: a
// host firing every second is never silent, and once it stops, status
// says so within 2C + 4 s = 6 s of its last firing.
func TestCronSilenceEvery(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	conf := filepath.Join(r.dir, "every.toml")
	if err := os.WriteFile(conf, []byte("schedule = \"@every 1s\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "--config", conf, "--host", "here", "--slots", "1", "--standby-slots", "0", "--lifetime", "2m", "--", "true"}
	h := r.start(args...)
	defer func() {
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
		h.wait(t, 20*time.Second)
	}()
	stop := r.cron(time.Second, args...)
	var s cronStatus
	eventually(t, 10*time.Second, "the holder publishes the host's firings", func() bool {
		s = cronStatus{}
		r.statusInto(&s, "--config", conf)
		_, ok := s.fire("here")
		return ok
	})
	if s.CronSilentAfter != 6*time.Second {
		t.Fatalf("cron_silent_after = %v for @every 1s, want 2C + 4s = 6s", s.CronSilentAfter)
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		s = cronStatus{}
		r.statusInto(&s, "--config", conf)
		if f, _ := s.fire("here"); f.Silent {
			t.Fatalf("host here fires every second but status calls it silent: %+v", f)
		}
	}
	stop()
	var last cronfire.Fire
	eventually(t, 20*time.Second, "status calls host here silent", func() bool {
		s = cronStatus{}
		r.statusInto(&s, "--config", conf)
		last, _ = s.fire("here")
		return last.Silent
	})
	// status takes a few hundred ms per call on a loaded machine: 3 s of slack.
	if late := time.Since(last.Last); late > 6*time.Second+3*time.Second {
		t.Fatalf("silence reported %v after the last firing, want within 2C + 4s = 6s", late.Round(time.Millisecond))
	}
	out, errOut, code := r.baton("status", "--config", conf)
	if code != 0 || !strings.Contains(out, "cron has not started baton on host here since") || !strings.Contains(out, "more than 2C + 4s = 6s") {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
}
