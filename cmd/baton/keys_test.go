package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// keyJob writes a job script that samples, as it starts, how many jobs of
// its key ($BATON_KEY) are running at that instant, fleet-wide on this
// machine: one file per job named by its pid, counted while that process
// lives (a job killed with its holder no longer counts). It logs
// "<key> <running>" to samples, runs secs seconds, then logs "end <job id>".
func (r *rig) keyJob(secs string) (job, samples string) {
	dir := filepath.Join(r.dir, "running")
	samples = filepath.Join(r.dir, "samples")
	job = r.script("keyjob.sh", `cat >/dev/null
d=`+dir+`/$BATON_KEY
mkdir -p $d
touch $d/$$
n=0
for f in $d/*; do
  s=$(cut -d' ' -f3 /proc/${f##*/}/stat 2>/dev/null)
  if [ -n "$s" ] && [ "$s" != Z ]; then n=$((n+1)); fi
done
echo "$BATON_KEY $n" >> `+samples+`
sleep `+secs+`
rm -f $d/$$
echo "end $BATON_JOB_ID" >> `+samples+"\n")
	return job, samples
}

// mostOfKey reads the samples: the most jobs of each key seen running at once.
func mostOfKey(t *testing.T, samples string) map[string]int {
	t.Helper()
	most := map[string]int{}
	for _, l := range readLines(t, samples) {
		f := strings.Fields(l)
		if len(f) != 2 || f[0] == "end" {
			continue
		}
		n, _ := strconv.Atoi(f[1])
		most[f[0]] = max(most[f[0]], n)
	}
	return most
}

// keysLeft are the Redis keys of the queue's job keys still there.
func (r *rig) keysLeft(q string) []string {
	ks, _ := r.client().Keys(context.Background(), "baton:{"+q+"}:key:*").Result()
	return ks
}

func (r *rig) keyConfig(body string) string {
	p := filepath.Join(r.dir, "keys.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		r.t.Fatal(err)
	}
	return p
}

// TestKeyCapUnderKill: three holders of concurrency 3 under cron, key a
// capped at 2 and key b at 1; holders are killed (kill -9) mid-job, their
// jobs killed with them. At no instant do more jobs of a key run than its
// cap (sampled by the jobs themselves); every job is done; the permits of
// the killed holders come back (their jobs replayed under them by the
// slots' next holders), and once all is done no permit is left.
func TestKeyCapUnderKill(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	job, samples := r.keyJob("0.3")
	cfg := r.keyConfig("key_concurrency = 2\n[key_limits]\nb = 1\n")
	for _, k := range []string{"a", "b"} {
		args := []string{"enqueue", "-q", "--key", k}
		for i := range 10 {
			args = append(args, k+strconv.Itoa(i))
		}
		if _, errOut, code := r.baton(args...); code != 0 {
			t.Fatal(errOut)
		}
	}
	stop := r.cron(200*time.Millisecond, "run", "--config", cfg, "--slots", "3", "--standby-slots", "0", "--concurrency", "3",
		"--poll-interval", "50ms", "--lifetime", "1m", "--", job)
	defer stop()
	kills := 0
	for kills < 3 {
		eventually(t, 20*time.Second, "a job running", func() bool { return len(readLines(t, samples)) > 2*kills+1 })
		if pids := r.heldPIDs("default", 3); len(pids) > 0 {
			_ = syscall.Kill(pids[0], syscall.SIGKILL)
			kills++
		}
		time.Sleep(400 * time.Millisecond)
	}
	eventually(t, 60*time.Second, "all 20 jobs done", func() bool { return r.status().Jobs.Done == 20 })
	stop()
	most := mostOfKey(t, samples)
	if most["a"] > 2 || most["b"] > 1 {
		t.Fatalf("most running at once %v, want a ≤ 2, b ≤ 1", most)
	}
	if most["a"] < 2 {
		t.Errorf("key a never ran 2 at once (%v): its cap unused", most)
	}
	eventually(t, 10*time.Second, "no permit nor waiting key left", func() bool { return len(r.keysLeft("default")) == 0 })
	if s := r.status(); s.Jobs.Waiting != 0 || s.Jobs.Pending != 0 {
		t.Errorf("after: %+v", *s.Jobs)
	}
	r.killHolders("default")
}

// TestKeyUncappedUnderKill: keys without a cap, whose jobs holders feed to
// the stream and read with a plain read: three holders under cron are
// killed (kill -9) mid-job, between reads and runs; every job is done, none
// is lost between the read script and the read, and nothing of keys is
// left afterwards.
func TestKeyUncappedUnderKill(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	job, samples := r.keyJob("0.05")
	cfg := r.keyConfig("")
	const perKey = 20
	for _, k := range []string{"a", "b", "c"} {
		args := []string{"enqueue", "-q", "--key", k}
		for i := range perKey {
			args = append(args, k+strconv.Itoa(i))
		}
		if _, errOut, code := r.baton(args...); code != 0 {
			t.Fatal(errOut)
		}
	}
	stop := r.cron(200*time.Millisecond, "run", "--config", cfg, "--slots", "3", "--standby-slots", "0", "--concurrency", "4",
		"--poll-interval", "50ms", "--lifetime", "1m", "--", job)
	defer stop()
	kills := 0
	for kills < 3 {
		eventually(t, 20*time.Second, "jobs running", func() bool { return len(readLines(t, samples)) > 6*(kills+1) })
		if pids := r.heldPIDs("default", 3); len(pids) > 0 {
			_ = syscall.Kill(pids[0], syscall.SIGKILL)
			kills++
		}
		time.Sleep(200 * time.Millisecond)
	}
	eventually(t, 60*time.Second, "all 60 jobs done", func() bool { return r.status().Jobs.Done == 3*perKey })
	stop()
	ended := map[string]bool{}
	for _, l := range readLines(t, samples) {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "end" {
			ended[f[1]] = true
		}
	}
	if len(ended) != 3*perKey {
		t.Errorf("%d distinct jobs ran to their end, want %d", len(ended), 3*perKey)
	}
	eventually(t, 10*time.Second, "no waiting key left", func() bool { return len(r.keysLeft("default")) == 0 })
	if s := r.status(); s.Jobs.Waiting != 0 || s.Jobs.Pending != 0 {
		t.Errorf("after: %+v", *s.Jobs)
	}
	r.killHolders("default")
}

// TestKeyCapHolderStoppedPastLease: fleet mode, key a capped at 1. The
// holder running a job of a is stopped (SIGSTOP) past its lease; its
// pending job keeps the key's permit, so no other job of a starts while it
// may still run; the next holder of the slot (another host) replays it
// under that permit, and the key's other jobs follow, one at a time. The
// stopped holder, resumed, writes nothing.
func TestKeyCapHolderStoppedPastLease(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	job, samples := r.keyJob("0.4")
	cfg := r.keyConfig("key_concurrency = 1\n")
	args := []string{"enqueue", "-q", "--key", "a"}
	for i := range 4 {
		args = append(args, "a"+strconv.Itoa(i))
	}
	if _, errOut, code := r.baton(args...); code != 0 {
		t.Fatal(errOut)
	}
	const ttl = 2400 * time.Millisecond
	common := []string{"--config", cfg, "--slots", "1", "--standby-slots", "0", "--concurrency", "3",
		"--lease-ttl", ttl.String(), "--lease-renew", "200ms", "--lifetime", "1m", "--", job}
	paused := r.start(r.fleetArgs("paused", common...)...)
	eventually(t, 10*time.Second, "a job of a starts on host paused", func() bool { return len(readLines(t, samples)) > 0 })
	_ = paused.cmd.Process.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	stop := r.cron(200*time.Millisecond, r.fleetArgs("other", common...)...)
	defer stop()
	st := []string{"--lock-backend", "redis", "--slots", "1", "--standby-slots", "0"}
	eventually(t, 30*time.Second, "host other does all 4 jobs", func() bool { return r.status(st...).Jobs.Done == 4 })
	if d := time.Since(stopped); d < ttl {
		t.Errorf("all done %s after the stop, before the lease TTL (%s): the stopped holder's permit was not kept", d, ttl)
	}
	stop()
	_ = paused.cmd.Process.Signal(syscall.SIGCONT)
	if code := paused.wait(t, 5*time.Second); code != 1 {
		t.Fatalf("resumed holder exit %d, want 1:\n%s", code, paused.log())
	}
	if most := mostOfKey(t, samples); most["a"] != 1 {
		t.Fatalf("most jobs of a at once: %d, want 1", most["a"])
	}
	if s := r.status(st...); s.Jobs.Done != 4 || s.Jobs.Pending != 0 || s.Jobs.Waiting != 0 {
		t.Errorf("after: %+v", *s.Jobs)
	}
	eventually(t, 10*time.Second, "no permit nor waiting key left", func() bool { return len(r.keysLeft("default")) == 0 })
	time.Sleep(500 * time.Millisecond)
	r.drainAll(1)
}

// TestKeyPeriodic: a [[periodic]] entry's key goes with each job it
// enqueues (BATON_KEY), under key_concurrency; a bad one is refused.
func TestKeyPeriodic(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	keys := filepath.Join(r.dir, "keys")
	job := r.script("job.sh", "cat >/dev/null; echo \"$BATON_KEY\" >> "+keys+"\n")
	cfg := r.periodicConfig("key_concurrency = 1\n[[periodic]]\nname = \"beat\"\nschedule = \"@every 1s\"\nkey = \"tenant-1\"\n")
	p := r.start("run", "--config", cfg, "--", job)
	eventually(t, 20*time.Second, "two periodic jobs ran with their key", func() bool {
		l := readLines(t, keys)
		return len(l) >= 2 && l[0] == "tenant-1" && l[1] == "tenant-1"
	})
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t, 10*time.Second)
	bad := r.periodicConfig("[[periodic]]\nname = \"beat\"\nschedule = \"@every 1s\"\nkey = \"a}b\"\n")
	if _, errOut, code := r.baton("check", "--config", bad); code != 2 || !strings.Contains(errOut, "key: bad job key") {
		t.Fatalf("check of a bad periodic key: exit %d, %s", code, errOut)
	}
}
