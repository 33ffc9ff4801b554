package main

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/cronfire"
)

// Every candidate marks cron's firing on its host (a losing one too, without
// Redis), the holder publishes it, and status warns about a host that has
// not fired for more than 2C + 30s; metrics show every host's last firing.
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
	stdout, errOut, code = r.baton("metrics")
	if code != 0 || !strings.Contains(stdout, `baton_cron_last_fire_timestamp_seconds{host="gone",queue="default"}`) ||
		!strings.Contains(stdout, `baton_cron_last_fire_timestamp_seconds{host="here",queue="default"}`) {
		t.Fatalf("metrics: exit %d\n%s%s", code, stdout, errOut)
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
