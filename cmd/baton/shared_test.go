package main

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSharedLockDirAcrossDatabases: production and staging use one queue
// name on two databases of one Redis server and, by default, one lock dir.
// Staging's holder keeps a slot; production's candidate refuses the shared
// lock dir (exit 2, a hint) instead of sharing staging's slots, and
// production's status warns that the holder is another deployment's.
func TestSharedLockDirAcrossDatabases(t *testing.T) {
	t.Parallel()
	prod := newRig(t)
	staging := &rig{t: t, redis: prod.redis, dir: prod.dir, locks: prod.locks,
		extraEnv: []string{"BATON_REDIS_URL=redis://" + prod.redis.Addr + "/1"}}
	t.Cleanup(func() {
		for _, p := range staging.procs {
			_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
	slots := []string{"--slots", "2", "--standby-slots", "1"}
	run := func(lifetime string) []string {
		return append(append([]string{"run"}, slots...), "--lifetime", lifetime, "--poll-interval", "100ms", "--", "true")
	}
	staging.start(run("1m")...)
	eventually(t, 10*time.Second, "staging holds a slot", func() bool { return held(staging.status(slots...).Run) == 1 })

	prod.baton("enqueue", "x")
	start := time.Now()
	_, errOut, code := prod.baton(run("2s")...)
	if code != 2 || !strings.Contains(errOut, "lock dir "+prod.locks+" is shared with another deployment") ||
		!strings.Contains(errOut, "working in Redis "+prod.redis.Addr+"/1, not "+prod.redis.Addr+"/0") ||
		!strings.Contains(errOut, "give each deployment its own lock_dir") {
		t.Fatalf("production candidate: exit %d after %v, stderr:\n%s\nwant exit 2 refusing the shared lock dir, with a hint",
			code, time.Since(start).Round(time.Millisecond), errOut)
	}

	var st struct {
		statusJSON
		Warnings []string
	}
	prod.statusInto(&st, slots...)
	if held(st.Run) != 1 || st.Jobs.Waiting != 1 {
		t.Fatalf("production status %+v: want staging's holder and the job waiting", st)
	}
	if len(st.Warnings) == 0 || !strings.Contains(strings.Join(st.Warnings, "\n"), "run slot "+strconv.Itoa(holderSlot(st.Run))+" is held by pid") ||
		!strings.Contains(strings.Join(st.Warnings, "\n"), "another deployment, working in Redis "+prod.redis.Addr+"/1") {
		t.Fatalf("production status warnings %q: want one naming staging's holder", st.Warnings)
	}
	out, _, _ := prod.baton(append([]string{"status"}, slots...)...)
	if !strings.Contains(out, "held by another deployment ("+prod.redis.Addr+"/1)") {
		t.Fatalf("production status table does not mark staging's holder:\n%s", out)
	}
	// Staging sees its own holder, without a warning.
	var sst struct{ Warnings []string }
	staging.statusInto(&sst, slots...)
	for _, w := range sst.Warnings {
		if strings.Contains(w, "another deployment") {
			t.Fatalf("staging warned about its own holder: %q", w)
		}
	}
}

func holderSlot(ss []slotJSON) int {
	for _, s := range ss {
		if s.Held {
			return s.Slot
		}
	}
	return -1
}
