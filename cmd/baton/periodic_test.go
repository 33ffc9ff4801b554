package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/cronfire"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/periodic"
	"github.com/baton-run/baton/work"
)

// periodicConfig writes a config with an @every 1s entry and returns its path.
func (r *rig) periodicConfig(entries string) string {
	r.t.Helper()
	p := filepath.Join(r.dir, "periodic.toml")
	if err := os.WriteFile(p, []byte("lifetime = \"10m\"\njitter = \"0s\"\n"+entries), 0o600); err != nil {
		r.t.Fatal(err)
	}
	return p
}

const beatEntry = `
[[periodic]]
name = "beat"
schedule = "@every 1s"
payload = "tick tock"
`

// ticksRun reads the job log: tick → jobs (distinct job ids: a job run
// twice after a kill is at-least-once, not a second enqueue), and the
// ticks in order.
func ticksRun(t *testing.T, path string) (map[string]int, []time.Time) {
	t.Helper()
	return tickJobs(t, readLines(t, path))
}

// tickJobs is ticksRun on lines "BATON_TICK BATON_PERIODIC BATON_JOB_ID".
func tickJobs(t *testing.T, lines []string) (map[string]int, []time.Time) {
	t.Helper()
	jobs := map[string]map[string]bool{}
	var ticks []time.Time
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 || f[1] != "beat" {
			t.Fatalf("job log line %q: want BATON_TICK BATON_PERIODIC BATON_JOB_ID", l)
		}
		if jobs[f[0]] == nil {
			at, err := time.Parse(time.RFC3339, f[0])
			if err != nil {
				t.Fatalf("BATON_TICK %q: %v", f[0], err)
			}
			ticks = append(ticks, at)
			jobs[f[0]] = map[string]bool{}
		}
		jobs[f[0]][f[2]] = true
	}
	count := map[string]int{}
	for tick, ids := range jobs {
		count[tick] = len(ids)
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
	return count, ticks
}

// queuedTicks is the job log's lines for the periodic jobs still in q's
// stream: enqueued, and pending for a holder that was killed (its slot's
// next holder would replay them) or not read yet.
func (r *rig) queuedTicks(q string) []string {
	r.t.Helper()
	es, err := r.client().XRange(context.Background(), work.KeysFor(q).Stream, "-", "+").Result()
	if err != nil {
		r.t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		tick, _ := e.Values[work.TickField].(string)
		name, _ := e.Values[work.PeriodicField].(string)
		if tick != "" {
			out = append(out, tick+" "+name+" "+e.ID)
		}
	}
	return out
}

// logLateness logs how late each tick was enqueued: its job id's time
// (Redis' clock at the XADD) minus the tick.
func logLateness(t *testing.T, path string) {
	var late []time.Duration
	for _, l := range readLines(t, path) {
		f := strings.Fields(l)
		at, _ := time.Parse(time.RFC3339, f[0])
		ms, err := strconv.ParseInt(strings.SplitN(f[2], "-", 2)[0], 10, 64)
		if err != nil {
			continue
		}
		late = append(late, time.UnixMilli(ms).Sub(at))
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	if len(late) > 0 {
		t.Logf("%d ticks enqueued late by: min %s, median %s, max %s", len(late), late[0], late[len(late)/2], late[len(late)-1])
	}
}

// checkOncePerTick fails unless every tick between the first and the last
// has exactly one job (count: tick → distinct job ids).
func checkOncePerTick(t *testing.T, count map[string]int, ticks []time.Time) {
	t.Helper()
	for tick, n := range count {
		if n != 1 {
			t.Errorf("tick %s has %d jobs", tick, n)
		}
	}
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != time.Second {
			t.Errorf("gap of %s between ticks %s and %s", d, ticks[i-1].Format(time.RFC3339), ticks[i].Format(time.RFC3339))
		}
	}
}

// Three holders on three simulated hosts (leases in Redis) race for every
// tick of @every 1s while one is killed with SIGKILL and another stopped
// with SIGSTOP and woken: every tick runs exactly once, none is skipped,
// and each job knows its tick and entry.
func TestPeriodicOncePerTickFleet(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	out := filepath.Join(r.dir, "ticks")
	job := r.script("job.sh", `cat >/dev/null; echo "$BATON_TICK $BATON_PERIODIC $BATON_JOB_ID" >> `+out+"\n")
	cfg := r.periodicConfig(beatEntry)
	common := []string{"--config", cfg, "--slots", "3", "--standby-slots", "0", "--lease-ttl", "6s", "--lease-renew", "500ms", "--", job}
	var ps []*process
	for _, h := range []string{"a", "b", "c"} {
		ps = append(ps, r.start(r.fleetArgs(h, common...)...))
	}
	eventually(t, 20*time.Second, "three ticks run", func() bool { _, ticks := ticksRun(t, out); return len(ticks) >= 3 })
	_ = ps[0].cmd.Process.Signal(syscall.SIGKILL)
	_ = ps[1].cmd.Process.Signal(syscall.SIGSTOP)
	eventually(t, 20*time.Second, "three more ticks run with one holder", func() bool { _, ticks := ticksRun(t, out); return len(ticks) >= 6 })
	_ = ps[1].cmd.Process.Signal(syscall.SIGCONT) // woken 3s late: its view is stale
	eventually(t, 20*time.Second, "four more ticks run", func() bool { _, ticks := ticksRun(t, out); return len(ticks) >= 10 })
	_ = ps[2].cmd.Process.Signal(syscall.SIGTERM)
	_ = ps[1].cmd.Process.Signal(syscall.SIGTERM)
	ps[2].wait(t, 20*time.Second)
	ps[1].wait(t, 20*time.Second)
	// The killed holder's job stays pending for its slot's next holder,
	// which this test does not start: it counts as enqueued.
	count, ticks := tickJobs(t, append(readLines(t, out), r.queuedTicks("default")...))
	checkOncePerTick(t, count, ticks)
	if t.Failed() {
		t.Logf("holder b: %s\nholder c: %s", ps[1].log(), ps[2].log())
	}
}

// A Redis restart (SIGKILL, AOF) while a holder runs: the record survives,
// the holder reconnects, and catch_up = "all" enqueues the ticks of the
// outage once each, none twice.
func TestPeriodicRedisRestart(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.Appendonly)
	out := filepath.Join(r.dir, "ticks")
	job := r.script("job.sh", `cat >/dev/null; echo "$BATON_TICK $BATON_PERIODIC $BATON_JOB_ID" >> `+out+"\n")
	cfg := r.periodicConfig(beatEntry + "catch_up = \"all\"\n")
	h := r.start("run", "--config", cfg, "--slots", "1", "--standby-slots", "0", "--", job)
	eventually(t, 20*time.Second, "three ticks run", func() bool { _, ticks := ticksRun(t, out); return len(ticks) >= 3 })
	r.redis.Stop()
	time.Sleep(2 * time.Second) // two ticks with Redis down
	r.redis.Restart()
	_, before := ticksRun(t, out)
	eventually(t, 30*time.Second, "five ticks after the restart", func() bool { _, ticks := ticksRun(t, out); return len(ticks) >= len(before)+5 })
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	h.wait(t, 20*time.Second)
	count, ticks := ticksRun(t, out)
	checkOncePerTick(t, count, ticks)
	if t.Failed() {
		t.Logf("holder: %s", h.log())
	}
}

// The same with flock slots on one machine: two holders race.
func TestPeriodicOncePerTickFlock(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	out := filepath.Join(r.dir, "ticks")
	job := r.script("job.sh", `cat >/dev/null; echo "$BATON_TICK $BATON_PERIODIC $BATON_JOB_ID" >> `+out+"\n")
	cfg := r.periodicConfig(beatEntry)
	a := r.start("run", "--config", cfg, "--slots", "2", "--standby-slots", "0", "--", job)
	b := r.start("run", "--config", cfg, "--slots", "2", "--standby-slots", "0", "--", job)
	eventually(t, 30*time.Second, "eight ticks run", func() bool { _, ticks := ticksRun(t, out); return len(ticks) >= 8 })
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	a.wait(t, 20*time.Second)
	b.wait(t, 20*time.Second)
	count, ticks := ticksRun(t, out)
	checkOncePerTick(t, count, ticks)
	logLateness(t, out)

	// baton periodic shows the entry, its next tick and its last job.
	stdout, errOut, code := r.baton("periodic", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("periodic exit %d: %s", code, errOut)
	}
	var rows []struct {
		Name     string    `json:"name"`
		Schedule string    `json:"schedule"`
		TimeZone string    `json:"time_zone"`
		Next     time.Time `json:"next_tick"`
		LastTick time.Time `json:"last_tick"`
		LastJob  string    `json:"last_job"`
	}
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
		t.Fatalf("periodic --json: %v\n%s", err, stdout)
	}
	if len(rows) != 1 || rows[0].Name != "beat" || rows[0].Schedule != "@every 1s" || rows[0].TimeZone != "UTC" ||
		rows[0].LastJob == "" || rows[0].LastTick.IsZero() || !rows[0].Next.After(rows[0].LastTick) {
		t.Fatalf("periodic --json = %+v", rows)
	}
	if rows[0].LastTick.Before(ticks[len(ticks)-1]) {
		t.Errorf("last tick claimed %v is before the last tick run %v", rows[0].LastTick, ticks[len(ticks)-1])
	}
	stdout, _, code = r.baton("periodic", "--config", cfg)
	if code != 0 || !strings.Contains(stdout, "beat") || !strings.Contains(stdout, "@every 1s") || !strings.Contains(stdout, rows[0].LastJob) {
		t.Fatalf("periodic exit %d:\n%s", code, stdout)
	}
}

// A bad entry: check and run exit 2 with one line naming the entry and the
// key, and run takes no slot.
func TestPeriodicBadEntryExits2(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cfg := r.periodicConfig(beatEntry + `
[[periodic]]
name = "nightly"
schedule = "CRON_TZ=Europe/Berlin 30 2 * * *"
catch_up = "sometimes"
`)
	want := `periodic "nightly": catch_up: "sometimes": want latest, none or all`
	_, errOut, code := r.baton("check", "--config", cfg)
	if code != 2 || !strings.Contains(errOut, want) || !strings.Contains(errOut, "periodic.toml:12:") {
		t.Fatalf("check: exit %d, stderr %q; want 2 and %q at line 12", code, errOut, want)
	}
	_, errOut, code = r.baton("run", "--config", cfg, "--", "true")
	if code != 2 || !strings.Contains(errOut, want) {
		t.Fatalf("run: exit %d, stderr %q; want 2 and %q", code, errOut, want)
	}
	if first := strings.SplitN(strings.TrimSpace(errOut), "\n", 2)[0]; !strings.Contains(first, want) {
		t.Fatalf("run's first line %q does not name the entry", first)
	}
	if entries, _ := os.ReadDir(r.locks); len(entries) != 0 {
		t.Fatalf("run with a bad entry touched the lock dir: %v", entries)
	}
	// A good entry whose job may outlast its period: a warning.
	cfg = r.periodicConfig(beatEntry)
	stdout, _, code := r.baton("check", "--config", cfg)
	if code == 2 || !regexp.MustCompile(`periodic-beat +job timeout < shortest gap between ticks +1m < 1s +- +WARN`).MatchString(stdout) {
		t.Fatalf("check of a good entry: exit %d\n%s", code, stdout)
	}
}

// overlap = "skip" with two holders and a job slower than the period: the
// ticks while a job is queued or running are skipped and counted, and no
// two of the entry's jobs ever run at once.
func TestPeriodicOverlapSkip(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	events := filepath.Join(r.dir, "events")
	job := r.script("job.sh", `cat >/dev/null
echo "start $BATON_TICK" >> `+events+`
sleep 2
echo "end $BATON_TICK" >> `+events+"\n")
	cfg := r.periodicConfig(beatEntry + "overlap = \"skip\"\n")
	a := r.start("run", "--config", cfg, "--slots", "2", "--standby-slots", "0", "--", job)
	b := r.start("run", "--config", cfg, "--slots", "2", "--standby-slots", "0", "--", job)
	eventually(t, 30*time.Second, "three jobs end", func() bool {
		n := 0
		for _, l := range readLines(t, events) {
			if strings.HasPrefix(l, "end ") {
				n++
			}
		}
		return n >= 3
	})
	running := 0
	for _, l := range readLines(t, events) {
		if strings.HasPrefix(l, "start ") {
			running++
		} else {
			running--
		}
		if running > 1 {
			t.Fatalf("two of the entry's jobs ran at once:\n%s", strings.Join(readLines(t, events), "\n"))
		}
	}
	stdout, errOut, code := r.baton("periodic", "--config", cfg, "--json")
	var rows []struct {
		Overlap string `json:"overlap"`
		Skipped int    `json:"skipped"`
	}
	if err := json.Unmarshal([]byte(stdout), &rows); code != 0 || err != nil || len(rows) != 1 || rows[0].Overlap != "skip" || rows[0].Skipped < 2 {
		t.Fatalf("periodic --json: exit %d %v %s %s", code, err, stdout, errOut)
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	a.wait(t, 20*time.Second)
	b.wait(t, 20*time.Second)
}

// status shows the entries, and warns when a tick went unclaimed (no
// holder ran): here the record says the last tick claimed was a minute ago.
func TestPeriodicStatus(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cfg := r.periodicConfig(beatEntry)
	past := time.Now().Add(-time.Minute).Truncate(time.Second)
	if err := r.client().HSet(context.Background(), periodic.RecordsKey("default"), "beat", past.UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	stdout, errOut, code := r.baton("status", "--config", cfg)
	if code != 0 || !strings.Contains(stdout, "periodic beat (@every 1s): next ") || !strings.Contains(stdout, "last "+past.UTC().Format(time.RFC3339)) ||
		!strings.Contains(stdout, `warning: periodic entry "beat": its tick of `) {
		t.Fatalf("status: exit %d\n%s%s", code, stdout, errOut)
	}
	var rep struct {
		Periodic []struct {
			Name      string    `json:"name"`
			Unclaimed time.Time `json:"unclaimed_tick"`
		} `json:"periodic"`
	}
	r.statusInto(&rep, "--config", cfg)
	if len(rep.Periodic) != 1 || rep.Periodic[0].Name != "beat" || rep.Periodic[0].Unclaimed.IsZero() {
		t.Fatalf("status --json periodic = %+v", rep.Periodic)
	}
}

// Two hosts run different entries under one name (a rolling deploy): each
// tick still runs once, and status names the hosts that disagree.
func TestPeriodicConfigsDiffer(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	out := filepath.Join(r.dir, "ticks")
	job := r.script("job.sh", `cat >/dev/null; echo "$BATON_TICK $BATON_PERIODIC $BATON_JOB_ID" >> `+out+"\n")
	oldCfg := r.periodicConfig(beatEntry)
	newCfg := filepath.Join(r.dir, "new.toml")
	if err := os.WriteFile(newCfg, []byte(strings.Replace(beatEntry, "tick tock", "tick tock v2", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	a := r.start("run", "--config", oldCfg, "--host", "old-host", "--lock-dir", filepath.Join(r.dir, "locks-a"), "--", job)
	b := r.start("run", "--config", newCfg, "--host", "new-host", "--lock-dir", filepath.Join(r.dir, "locks-b"), "--", job)
	eventually(t, 30*time.Second, "status names both hosts", func() bool {
		stdout, _, _ := r.baton("status", "--config", newCfg)
		return strings.Contains(stdout, "warning: the hosts run different [[periodic]] entries: ") &&
			strings.Contains(stdout, "new-host (") && strings.Contains(stdout, "old-host (")
	})
	eventually(t, 30*time.Second, "five ticks run", func() bool { _, ticks := ticksRun(t, out); return len(ticks) >= 5 })
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	a.wait(t, 20*time.Second)
	b.wait(t, 20*time.Second)
	count, ticks := ticksRun(t, out)
	checkOncePerTick(t, count, ticks)
}

// A queue whose only keys are periodic's and cron's (its entries' records
// and hosts, a fleet's losing candidates' firings: no job enqueued yet)
// exists: status does not call it a typo, and queues lists it. With no key
// at all, status says that no holder of the entries has run.
func TestPeriodicOnlyQueueStatus(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cfg := r.periodicConfig(beatEntry)
	stdout, errOut, code := r.baton("status", "--config", cfg, "--queue", "reports")
	if code != 0 || !strings.Contains(stdout, "warning: queue reports has no keys in this Redis database yet: its [[periodic]] entries are enqueued by its holders, and none has run") ||
		strings.Contains(stdout, "a typo?") {
		t.Fatalf("status of an empty periodic queue: exit %d\n%s%s", code, stdout, errOut)
	}
	ctx := context.Background()
	if err := r.client().HSet(ctx, periodic.RecordsKey("reports"), "beat", time.Now().Truncate(time.Second).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cronfire.Publish(ctx, r.client(), "reports", "b", time.Now()); err != nil {
		t.Fatal(err)
	}
	stdout, errOut, code = r.baton("status", "--config", cfg, "--queue", "reports")
	if code != 0 || strings.Contains(stdout, "has no keys") || !strings.Contains(stdout, "periodic beat (@every 1s)") || !strings.Contains(stdout, "\ncron     b: started baton at ") {
		t.Fatalf("status of a periodic-only queue: exit %d\n%s%s", code, stdout, errOut)
	}
	stdout, errOut, code = r.baton("queues")
	if code != 0 || !strings.Contains(stdout, "reports") {
		t.Fatalf("queues: exit %d\n%s%s", code, stdout, errOut)
	}
}

// entryTicks reads a job log of "BATON_TICK BATON_PERIODIC BATON_JOB_ID"
// lines: entry → tick → distinct job ids.
func entryTicks(t *testing.T, path string) map[string]map[time.Time]map[string]bool {
	t.Helper()
	out := map[string]map[time.Time]map[string]bool{}
	for _, l := range readLines(t, path) {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("job log line %q", l)
		}
		at, err := time.Parse(time.RFC3339, f[0])
		if err != nil {
			t.Fatalf("BATON_TICK %q: %v", f[0], err)
		}
		if out[f[1]] == nil {
			out[f[1]] = map[time.Time]map[string]bool{}
		}
		if out[f[1]][at] == nil {
			out[f[1]][at] = map[string]bool{}
		}
		out[f[1]][at][f[2]] = true
	}
	return out
}

// A config change mid-run, as a deploy does it: a holder with the new
// config (beat every 2 s instead of every second, entry "old" removed)
// starts while the old one runs, then the old one leaves. Every tick runs
// once whichever config claims it; once the old holder is gone, beat
// follows the new schedule and "old" stops firing.
func TestPeriodicConfigChangeMidRun(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	out := filepath.Join(r.dir, "ticks")
	job := r.script("job.sh", `cat >/dev/null; echo "$BATON_TICK $BATON_PERIODIC $BATON_JOB_ID" >> `+out+"\n")
	oldCfg := r.periodicConfig(beatEntry + "\n[[periodic]]\nname = \"old\"\nschedule = \"@every 1s\"\n")
	newCfg := filepath.Join(r.dir, "new.toml")
	if err := os.WriteFile(newCfg, []byte(strings.Replace(beatEntry, "@every 1s", "@every 2s", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	a := r.start("run", "--config", oldCfg, "--host", "a", "--lock-dir", filepath.Join(r.dir, "locks-a"), "--", job)
	eventually(t, 30*time.Second, "three ticks of each entry", func() bool {
		m := entryTicks(t, out)
		return len(m["beat"]) >= 3 && len(m["old"]) >= 3
	})
	b := r.start("run", "--config", newCfg, "--host", "b", "--lock-dir", filepath.Join(r.dir, "locks-b"), "--", job)
	time.Sleep(3 * time.Second) // both configs claim for a few ticks
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	a.wait(t, 20*time.Second)
	switched := time.Now()
	eventually(t, 30*time.Second, "four ticks of the new schedule", func() bool {
		n := 0
		for at := range entryTicks(t, out)["beat"] {
			if at.After(switched.Add(time.Second)) {
				n++
			}
		}
		return n >= 4
	})
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	b.wait(t, 20*time.Second)
	m := entryTicks(t, out)
	for name, ticks := range m {
		for at, ids := range ticks {
			if len(ids) != 1 {
				t.Errorf("%s tick %s ran as %d jobs", name, at.Format(time.RFC3339), len(ids))
			}
			if name == "old" && at.After(switched.Add(time.Second)) {
				t.Errorf("entry old, removed from every config, fired at %s", at.Format(time.RFC3339))
			}
			if name == "beat" && at.After(switched.Add(time.Second)) && at.Unix()%2 != 0 {
				t.Errorf("beat fired at %s after the old config left: not a tick of @every 2s", at.Format(time.RFC3339))
			}
		}
	}
	// No tick of beat is lost: every second while the old config ran,
	// every other second after.
	var beats []time.Time
	for at := range m["beat"] {
		beats = append(beats, at)
	}
	sort.Slice(beats, func(i, j int) bool { return beats[i].Before(beats[j]) })
	for i := 1; i < len(beats); i++ {
		if d := beats[i].Sub(beats[i-1]); d > 2*time.Second {
			t.Errorf("gap of %s in beat's ticks between %s and %s", d, beats[i-1].Format(time.RFC3339), beats[i].Format(time.RFC3339))
		}
	}
	if t.Failed() {
		t.Logf("holder a: %s\nholder b: %s", a.log(), b.log())
	}
}

// A holder stopped (SIGSTOP) past its lease, in fleet mode, while a
// standby on another host takes the lease over and claims the ticks: woken,
// its claims of the ticks it saw due are refused (fenced, and claimed
// already) and every tick still runs once, with no gap.
func TestPeriodicStoppedPastItsLease(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	out := filepath.Join(r.dir, "ticks")
	job := r.script("job.sh", `cat >/dev/null; echo "$BATON_TICK $BATON_PERIODIC $BATON_JOB_ID" >> `+out+"\n")
	cfg := r.periodicConfig(beatEntry)
	common := []string{"--config", cfg, "--slots", "1", "--standby-slots", "1", "--lease-ttl", "2s", "--lease-renew", "500ms", "--", job}
	a := r.start(r.fleetArgs("a", common...)...)
	eventually(t, 20*time.Second, "a holds the lease and three ticks run", func() bool {
		_, ticks := ticksRun(t, out)
		return published(r.leases("default", 1)) == 1 && len(ticks) >= 3
	})
	b := r.start(r.fleetArgs("b", common...)...) // the standby
	eventually(t, 20*time.Second, "b stands by", func() bool {
		return heldRecs(r.recordsOf(lock.NewLeaseSet(r.client(), "default", lock.RoleStandby, 1, lock.LeaseOptions{}))) == 1
	})
	_ = a.cmd.Process.Signal(syscall.SIGSTOP)
	_, before := ticksRun(t, out)
	eventually(t, 30*time.Second, "b takes the lease over and runs three ticks", func() bool {
		_, ticks := ticksRun(t, out)
		return len(ticks) >= len(before)+3
	})
	time.Sleep(3 * time.Second) // a is now 2 lease TTLs past its lease
	_ = a.cmd.Process.Signal(syscall.SIGCONT)
	a.wait(t, 20*time.Second) // it finds its lease lost and leaves
	_, now := ticksRun(t, out)
	eventually(t, 20*time.Second, "three more ticks", func() bool { _, ticks := ticksRun(t, out); return len(ticks) >= len(now)+3 })
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	b.wait(t, 20*time.Second)
	count, ticks := tickJobs(t, append(readLines(t, out), r.queuedTicks("default")...))
	checkOncePerTick(t, count, ticks)
	if t.Failed() {
		t.Logf("holder a: %s\nholder b: %s", a.log(), b.log())
	}
}
