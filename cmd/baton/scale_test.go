package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/lock"
)

// slotTable reads queue q's n slots of a role directly, without Redis.
func (r *rig) slotTable(q, role string, n int) []lock.Record {
	r.t.Helper()
	return r.recordsOf(lock.NewFileSet(r.locks, q, role, n))
}

func heldSlots(rs []lock.Record) (idx []int) {
	for _, rec := range rs {
		if rec.Held {
			idx = append(idx, rec.Slot)
		}
	}
	return idx
}

// scaleUps returns the candidates of every "scale up" line in log.
func scaleUps(t *testing.T, log string) (n []int) {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `"scale up"`) {
			continue
		}
		var l struct{ Candidates int }
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		n = append(n, l.Candidates)
	}
	return n
}

// sampler records, every 20ms until stopped, the fewest and most run slots
// held and every pid seen in a standby slot.
type sampler struct {
	stop     func()
	min, max int
	standby  map[int]bool
}

func (r *rig) sample(q string, n int) *sampler {
	s := &sampler{min: 1 << 30, standby: map[int]bool{}}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			h := len(heldSlots(r.slotTable(q, lock.RoleRun, n)))
			s.min, s.max = min(s.min, h), max(s.max, h)
			for _, rec := range r.slotTable(q, lock.RoleStandby, n) {
				if rec.Held {
					s.standby[rec.PID] = true
				}
			}
			select {
			case <-quit:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	s.stop = func() { once.Do(func() { close(quit); <-done }) }
	return s
}

func (r *rig) enqueueN(q string, n int) {
	r.t.Helper()
	args := []string{"enqueue", "--queue", q}
	for i := 0; i < n; i++ {
		args = append(args, strconv.Itoa(i))
	}
	if _, errOut, code := r.baton(args...); code != 0 {
		r.t.Fatalf("enqueue: %s", errOut)
	}
}

// scaleArgs are run's flags for scaling tests: a quick scale-up and a 1s idle exit.
func scaleArgs(q string, slots, keep int, extra ...string) []string {
	return append([]string{"run", "--queue", q, "--slots", strconv.Itoa(slots), "--min-slots", strconv.Itoa(keep),
		"--lifetime", "1m", "--scale-up-backlog", "10", "--scale-up-age", "0s", "--idle-exit", "1s", "--poll-interval", "50ms"}, extra...)
}

// TestScaleUpBoundedByFreeSlots: slots 4, min_slots 1, one run slot held by
// someone else (this test). A burst makes the holder start candidates for
// exactly the 2 free slots, never more; when the queue is empty they leave
// after idle_exit and the kept holder stays.
func TestScaleUpBoundedByFreeSlots(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	t.Cleanup(func() { r.killHolders("b") })
	job := r.script("job.sh", "cat >/dev/null; sleep 0.02\n")
	p := r.start(append(scaleArgs("b", 4, 1), "--", job)...)
	eventually(t, 10*time.Second, "the kept slot is held", func() bool { return r.slotTable("b", lock.RoleRun, 4)[0].Held })
	// Take one of the other run slots, as a holder of another config would.
	all, _ := lock.NewFileSet(r.locks, "b", lock.RoleRun, 4)
	mine, ok, err := all.TryAcquire()
	if err != nil || !ok || mine.Index() == 0 {
		t.Fatalf("take a run slot: %v %v %v", mine, ok, err)
	}
	defer mine.Release()
	s := r.sample("b", 4)
	defer s.stop()
	r.enqueueN("b", 200)
	eventually(t, 10*time.Second, "every run slot held", func() bool { return len(heldSlots(r.slotTable("b", lock.RoleRun, 4))) == 4 })
	eventually(t, 30*time.Second, "the queue drained", func() bool { return r.status("--queue", "b").Jobs.Done == 200 })
	eventually(t, 10*time.Second, "back to the kept holder", func() bool {
		return len(heldSlots(r.slotTable("b", lock.RoleRun, 4))) == 2
	})
	s.stop()
	ups := scaleUps(t, p.log())
	if len(ups) == 0 {
		t.Fatalf("no scale-up logged:\n%s", p.log())
	}
	for _, n := range ups {
		if n < 1 || n > 2 {
			t.Fatalf("scale-up of %d candidates with 2 run slots free: %v\n%s", n, ups, p.log())
		}
	}
	if s.max > 4 {
		t.Fatalf("%d run slots held of 4", s.max)
	}
	if len(s.standby) > 0 {
		t.Fatalf("a standby slot was taken: %v", s.standby)
	}
	if got := heldSlots(r.slotTable("b", lock.RoleRun, 4)); got[0] != 0 || r.slotTable("b", lock.RoleRun, 4)[0].PID != p.cmd.Process.Pid {
		t.Fatalf("held %v: want the kept holder (pid %d) in run-0", got, p.cmd.Process.Pid)
	}
	if !strings.Contains(p.log(), "scale down") {
		t.Fatalf("no scale-down logged:\n%s", p.log())
	}
	out, _, _ := r.baton("status", "--queue", "b", "--slots", "4", "--min-slots", "1")
	for _, want := range []string{"scale 2 holders now, kept 1 (min_slots), at most 4 (slots)", "last leave: idle"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status lacks %q:\n%s", want, out)
		}
	}
}

// TestNoScaleFromDrainingHolder: a holder told to stop (SIGTERM) while a job
// runs sees a backlog and starts no one.
func TestNoScaleFromDrainingHolder(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	started := r.dir + "/started"
	job := r.script("job.sh", "read p; if [ \"$p\" = slow ]; then touch "+started+"; sleep 4; fi\n")
	p := r.start(append(scaleArgs("d", 4, 1, "--shutdown-grace", "10s"), "--", job)...)
	if _, errOut, code := r.baton("enqueue", "--queue", "d", "slow"); code != 0 {
		t.Fatal(errOut)
	}
	eventually(t, 10*time.Second, "the slow job started", func() bool { _, err := os.Stat(started); return err == nil })
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	eventually(t, 5*time.Second, "the holder drains", func() bool { return strings.Contains(p.log(), "draining") })
	r.enqueueN("d", 200)
	s := r.sample("d", 4)
	time.Sleep(2500 * time.Millisecond) // 2 scale decisions at least
	s.stop()
	if ups := scaleUps(t, p.log()); len(ups) > 0 {
		t.Fatalf("a draining holder scaled up: %v\n%s", ups, p.log())
	}
	if s.max != 1 {
		t.Fatalf("%d run slots held while the only holder drained", s.max)
	}
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.log())
	}
}

// TestScaleDownNeverBelowK: min_slots 2 of 4. After a burst the scaled
// holders leave when idle, down to 2 and never fewer; with a kept holder
// killed, the idle holder just above it stays (it covers k), and the top one
// leaves.
func TestScaleDownNeverBelowK(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	t.Cleanup(func() { r.killHolders("k") })
	job := r.script("job.sh", "cat >/dev/null; sleep 0.02\n")
	args := append(scaleArgs("k", 4, 2, "--standby-slots", "0", "--idle-exit", "3s"), "--", job)
	a, b := r.start(args...), r.start(args...)
	eventually(t, 10*time.Second, "the 2 kept slots held", func() bool {
		rs := r.slotTable("k", lock.RoleRun, 4)
		return rs[0].Held && rs[1].Held
	})
	r.enqueueN("k", 120)
	eventually(t, 10*time.Second, "4 holders", func() bool { return len(heldSlots(r.slotTable("k", lock.RoleRun, 4))) == 4 })
	s := r.sample("k", 4)
	eventually(t, 30*time.Second, "the queue drained", func() bool { return r.status("--queue", "k").Jobs.Done == 120 })
	eventually(t, 10*time.Second, "back to 2", func() bool { return len(heldSlots(r.slotTable("k", lock.RoleRun, 4))) == 2 })
	time.Sleep(3200 * time.Millisecond) // past idle_exit again: still 2
	s.stop()
	if got := heldSlots(r.slotTable("k", lock.RoleRun, 4)); len(got) != 2 || got[0] != 0 || got[1] != 1 || s.min < 2 {
		t.Fatalf("held %v, fewest seen %d: want run-0 and run-1, never fewer than 2\n%s", got, s.min, a.log()+b.log())
	}
	if out, _, _ := r.baton("status", "--queue", "k"); !strings.Contains(out, "left early (idle above min_slots)") {
		t.Errorf("status does not say why the scaled holders left:\n%s", out)
	}

	// Scale up again; once the queue is empty, before idle_exit, kill the
	// holder of run-0: run-2's holder must stay (only run-1 is below it),
	// run-3's leaves.
	r.enqueueN("k", 120)
	eventually(t, 10*time.Second, "4 holders again", func() bool { return len(heldSlots(r.slotTable("k", lock.RoleRun, 4))) == 4 })
	eventually(t, 30*time.Second, "the queue drained", func() bool { return r.status("--queue", "k").Jobs.Done == 240 })
	_ = syscall.Kill(r.slotTable("k", lock.RoleRun, 4)[0].PID, syscall.SIGKILL)
	s = r.sample("k", 4)
	eventually(t, 10*time.Second, "run-3 left", func() bool { return !r.slotTable("k", lock.RoleRun, 4)[3].Held })
	time.Sleep(3200 * time.Millisecond)
	s.stop()
	if got := heldSlots(r.slotTable("k", lock.RoleRun, 4)); len(got) != 2 || got[0] != 1 || got[1] != 2 || s.min < 2 {
		t.Fatalf("held %v, fewest seen %d: want run-1 and run-2 (k = 2 with run-0 dead)\n%s", got, s.min, a.log()+b.log())
	}
}

// TestScaleKeepsStandbyPool: the standby waiting for the kept slot stays in
// its standby slot while holders scale up and down, no scale-up candidate
// takes a standby slot, and it is promoted when the kept holder dies.
func TestScaleKeepsStandbyPool(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	t.Cleanup(func() { r.killHolders("s") })
	job := r.script("job.sh", "cat >/dev/null; sleep 0.02\n")
	args := append(scaleArgs("s", 3, 1, "--standby-slots", "1"), "--", job)
	a := r.start(args...)
	eventually(t, 10*time.Second, "run-0 held", func() bool { return r.slotTable("s", lock.RoleRun, 3)[0].Held })
	sb := r.start(args...)
	eventually(t, 10*time.Second, "standby-0 held", func() bool { return r.slotTable("s", lock.RoleStandby, 1)[0].Held })
	s := r.sample("s", 3)
	r.enqueueN("s", 200)
	eventually(t, 10*time.Second, "3 holders", func() bool { return len(heldSlots(r.slotTable("s", lock.RoleRun, 3))) == 3 })
	eventually(t, 30*time.Second, "the queue drained", func() bool { return r.status("--queue", "s").Jobs.Done == 200 })
	eventually(t, 10*time.Second, "back to 1 holder", func() bool { return len(heldSlots(r.slotTable("s", lock.RoleRun, 3))) == 1 })
	s.stop()
	if len(s.standby) != 1 || !s.standby[sb.cmd.Process.Pid] {
		t.Fatalf("standby slot holders seen %v, want only the standby (pid %d)", s.standby, sb.cmd.Process.Pid)
	}
	if ups := scaleUps(t, a.log()); len(ups) == 0 {
		t.Fatalf("no scale-up:\n%s", a.log())
	}
	_ = syscall.Kill(a.cmd.Process.Pid, syscall.SIGKILL)
	eventually(t, 5*time.Second, "the standby is promoted to run-0", func() bool {
		return r.slotTable("s", lock.RoleRun, 3)[0].PID == sb.cmd.Process.Pid
	})
}

// TestFleetScaleUsesLeases: min_slots 1 of 3 slots as fleet leases, on two
// simulated hosts. Cron's candidates keep the fleet's lowest lease (one
// holder on h1, a standby lease on h2), not a flock per host; a burst
// scales up to every run lease and never past 3 holders or 3 jobs at once
// (the jobs' own records); the standby lease stays with its standby; when
// the queue is empty the scaled holders leave and one lease stays held.
func TestFleetScaleUsesLeases(t *testing.T) {
	t.Parallel()
	const slots, jobs = 3, 300
	r := newRig(t)
	events := filepath.Join(r.dir, "events")
	job := r.script("job.sh", `cat >/dev/null
echo "s $(date +%s%N) $BATON_SLOT" >> `+events+`
sleep 0.02
echo "e $(date +%s%N) $BATON_SLOT" >> `+events+"\n")
	flags := []string{"--slots", strconv.Itoa(slots), "--min-slots", "1", "--standby-slots", "1", "--lifetime", "1m",
		"--scale-up-backlog", "10", "--scale-up-age", "0s", "--idle-exit", "1s", "--poll-interval", "50ms",
		"--lease-ttl", "6s", "--lease-renew", "500ms", "--", job}
	t.Cleanup(func() { r.drainAll(0) })
	kept := r.start(r.fleetArgs("h1", flags...)...)
	eventually(t, 10*time.Second, "h1 holds the fleet's kept run lease", func() bool {
		rs := r.leases("default", slots)
		return rs[0].Held && rs[0].PID == kept.cmd.Process.Pid
	})
	sb := r.start(r.fleetArgs("h2", flags...)...)
	standbyLease := func() lock.Record {
		return r.recordsOf(lock.NewLeaseSet(r.client(), "default", lock.RoleStandby, 1, lock.LeaseOptions{}))[0]
	}
	eventually(t, 10*time.Second, "h2 holds the standby lease", func() bool {
		l := standbyLease()
		return l.Held && l.PID == sb.cmd.Process.Pid
	})
	for _, h := range []string{"h1", "h2"} {
		if got := heldSlots(r.recordsOf(lock.NewFileSet(filepath.Join(r.dir, "locks-"+h), "default", lock.RoleRun, slots))); len(got) > 0 {
			t.Fatalf("%s: flock run slots %v held in fleet mode: the kept slots must be leases", h, got)
		}
	}

	stopSampling := r.sampleLeases("default", slots)
	defer stopSampling()
	r.enqueueN("default", jobs)
	eventually(t, 15*time.Second, "every run lease held", func() bool { return heldRecs(r.leases("default", slots)) == slots })
	eventually(t, 60*time.Second, "the queue drained", func() bool {
		return r.status("--lock-backend", "redis", "--slots", strconv.Itoa(slots)).Jobs.Done == jobs
	})
	eventually(t, 15*time.Second, "back to the kept holder", func() bool { return heldRecs(r.leases("default", slots)) == 1 })
	most := stopSampling()
	if most > slots {
		t.Errorf("%d run leases held at once, want at most %d", most, slots)
	}
	if rs := r.leases("default", slots); !rs[0].Held || rs[0].PID != kept.cmd.Process.Pid {
		t.Errorf("run-0 lease %+v: want the kept holder (pid %d)", rs[0], kept.cmd.Process.Pid)
	}
	if l := standbyLease(); !l.Held || l.PID != sb.cmd.Process.Pid {
		t.Errorf("standby lease %+v: want the standby (pid %d) throughout", l, sb.cmd.Process.Pid)
	}
	if ups := scaleUps(t, kept.log()); len(ups) == 0 {
		t.Errorf("no scale-up logged:\n%s", kept.log())
	}

	var evs []jobEvent
	for _, l := range readLines(t, events) {
		f := strings.Fields(l)
		at, _ := strconv.ParseInt(f[1], 10, 64)
		evs = append(evs, jobEvent{at, f[0] == "s"})
	}
	peak := mostAtOnce(evs)
	if peak > slots {
		t.Errorf("%d jobs ran at once across the fleet, want at most %d", peak, slots)
	}
	t.Logf("at most %d leases and %d jobs at once", most, peak)
}
