package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestUniqueKeyFreedAfterHolderKilled: a holder killed (kill -9) while it
// runs a unique job does not leave the key held forever: the job is replayed,
// and the key is freed when it is finally done.
func TestUniqueKeyFreedAfterHolderKilled(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	once := filepath.Join(r.dir, "killed-once")
	ran := filepath.Join(r.dir, "ran")
	job := r.script("job.sh", `cat >> `+ran+`; echo >> `+ran+`
if [ ! -e `+once+` ]; then touch `+once+`; kill -9 $PPID; sleep 5; fi
`)
	out, _, code := r.baton("enqueue", "--unique-key", "report-7", "payload")
	first := strings.TrimSpace(out)
	if code != 0 || first == "" {
		t.Fatalf("enqueue: %d %q", code, out)
	}
	stop := r.cron(200*time.Millisecond, "run", "--poll-interval", "50ms", "--lifetime", "1m", "--", job)
	defer stop()
	defer r.killHolders("default")
	eventually(t, 30*time.Second, "the job done after its holder was killed", func() bool {
		return r.status().Jobs.Done == 1
	})
	if n := len(readLines(t, ran)); n != 2 {
		t.Fatalf("ran %d times, want 2 (killed once, then done)", n)
	}
	out, _, code = r.baton("enqueue", "--unique-key", "report-7", "--json", "payload")
	if code != 0 || !strings.Contains(out, `"duplicate":false`) || strings.Contains(out, first) {
		t.Fatalf("the key is still held after the job was done: %d %s", code, out)
	}
}

// TestDelayedJobsSurviveKilledHolders: 100 delayed jobs come due while
// holders are killed with kill -9 every 300ms (from 1s to 3s after the
// enqueue; due at 1.5s): every job runs, none is left scheduled, none lost.
func TestDelayedJobsSurviveKilledHolders(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ran := filepath.Join(r.dir, "ran")
	job := r.script("job.sh", `printf '%s\n' "$(cat)" >> `+ran+"\n")
	args := []string{"enqueue", "-q", "--in", "1500ms"}
	for i := 0; i < 100; i++ {
		args = append(args, "job-"+strconv.Itoa(i))
	}
	if _, errOut, code := r.baton(args...); code != 0 {
		t.Fatal(errOut)
	}
	stop := r.cron(100*time.Millisecond, "run", "--slots", "2", "--poll-interval", "50ms", "--lifetime", "1m", "--", job)
	defer stop()
	defer r.killHolders("default")
	enqueued := time.Now()
	kills := 0
	for time.Since(enqueued) < 3*time.Second {
		time.Sleep(300 * time.Millisecond)
		if time.Since(enqueued) > time.Second {
			r.killHolders("default")
			kills++
		}
	}
	last := time.Now()
	eventually(t, 60*time.Second, "every delayed job done", func() bool {
		s := r.status()
		if time.Since(last) > 2*time.Second {
			last = time.Now()
			t.Logf("%v: %+v", time.Since(enqueued).Round(time.Second), *s.Jobs)
		}
		return s.Jobs.Done == 100 && s.Jobs.Waiting == 0 && s.Jobs.Pending == 0
	})
	t.Logf("%d kill rounds around the due time", kills)
	seen := map[string]bool{}
	for _, l := range readLines(t, ran) {
		seen[l] = true
	}
	for i := 0; i < 100; i++ {
		if !seen["job-"+strconv.Itoa(i)] {
			t.Errorf("job-%d never ran", i)
		}
	}
	if s := r.status(); s.Jobs.Scheduled != 0 {
		t.Fatalf("%d still scheduled", s.Jobs.Scheduled)
	}
}

// TestRejectExitCodes: an exec job that exits 65 (EX_DATAERR, the default
// reject_exit_codes) is dead-lettered at once as rejected; one that exits 3
// is retried; a job's own --timeout is enforced for exec jobs too.
func TestRejectExitCodes(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	job := r.script("job.sh", `case "$(cat)" in
reject) echo "bad input" >&2; exit 65;;
fail) exit 3;;
slow) sleep 30;;
esac
`)
	r.baton("enqueue", "-q", "reject", "fail")
	r.baton("enqueue", "-q", "--timeout", "200ms", "--max-attempts", "1", "slow")
	r.start("run", "--max-attempts", "2", "--retry-backoff", "50ms", "--lifetime", "1m", "--", job)
	defer r.killHolders("default")
	eventually(t, 30*time.Second, "three dead letters", func() bool { return len(r.dead(t)) == 3 })
	reasons := map[string]deadJSON{}
	for _, d := range r.dead(t) {
		reasons[d.Reason] = d
	}
	if d := reasons["rejected"]; d.Attempts != 1 || !strings.Contains(d.Error, "exit status 65 (rejected: not retried): bad input") {
		t.Fatalf("rejected: %+v", d)
	}
	if d := reasons["failed"]; d.Attempts != 2 {
		t.Fatalf("failed: %+v, want 2 attempts", d)
	}
	if d := reasons["timeout"]; d.Attempts != 1 {
		t.Fatalf("timeout: %+v, want 1 attempt after its own 200ms timeout", d)
	}
}

// TestJobFindsDelayedAndPriorityJobs: `baton job ID` finds a delayed job and
// jobs of every level by the id `baton enqueue` printed.
func TestJobFindsDelayedAndPriorityJobs(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for _, c := range []struct {
		args            []string
		state, priority string
	}{
		{[]string{"--in", "1h"}, "scheduled", ""},
		{[]string{"--priority", "high"}, "waiting", "high"},
		{[]string{"--priority", "low", "--in", "1h"}, "scheduled", ""},
		{[]string{"--priority", "low"}, "waiting", "low"},
		{nil, "waiting", ""},
	} {
		out, errOut, code := r.baton(append(append([]string{"enqueue"}, c.args...), "payload")...)
		id := strings.TrimSpace(out)
		if code != 0 || id == "" {
			t.Fatalf("enqueue %v: exit %d %s", c.args, code, errOut)
		}
		out, errOut, code = r.baton("job", "--lock-dir", r.locks, "--json", id)
		var loc struct{ ID, State, Priority string }
		if err := json.Unmarshal([]byte(out), &loc); code != 0 || err != nil {
			t.Fatalf("job %s: exit %d %v %s", id, code, err, errOut)
		}
		if loc.ID != id || loc.State != c.state || loc.Priority != c.priority {
			t.Fatalf("enqueue %v, then job %s: %+v, want %s %q", c.args, id, loc, c.state, c.priority)
		}
	}
}

// TestJobSaysDone: with retention = "1h", `baton job ID` says a job a
// holder finished is done, and when (exit 0; --json: state done, done_at);
// without a retention the same job is unknown (exit 1), as done jobs are
// not kept.
func TestJobSaysDone(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, config string
	}{
		{"retention 1h", "retention = \"1h\"\n"},
		{"no retention", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			conf := filepath.Join(r.dir, "baton.toml")
			if err := os.WriteFile(conf, []byte(c.config), 0o600); err != nil {
				t.Fatal(err)
			}
			out, errOut, code := r.baton("enqueue", "payload")
			id := strings.TrimSpace(out)
			if code != 0 || id == "" {
				t.Fatalf("enqueue: exit %d %s", code, errOut)
			}
			before := time.Now()
			if _, errOut, code := r.baton("run", "--config", conf, "--lifetime", "1s", "--jitter", "0", "--standby-slots", "0", "--", "/bin/true"); code != 0 {
				t.Fatalf("run: exit %d %s", code, errOut)
			}
			if s := r.status(); s.Jobs.Done != 1 {
				t.Fatalf("status: %d done, want 1", s.Jobs.Done)
			}
			out, errOut, code = r.baton("job", "--lock-dir", r.locks, id)
			jout, jerr, jcode := r.baton("job", "--lock-dir", r.locks, "--json", id)
			var loc struct {
				ID, State string
				DoneAt    time.Time `json:"done_at"`
			}
			if err := json.Unmarshal([]byte(jout), &loc); err != nil {
				t.Fatalf("job --json: %v: %s %s", err, jout, jerr)
			}
			if c.config == "" {
				if code != 1 || !strings.Contains(errOut, "job "+id+" is unknown on queue default: done and not kept (see retention), or never enqueued here") {
					t.Fatalf("job without retention: exit %d, stdout %q, stderr %q; want unknown, exit 1", code, out, errOut)
				}
				if jcode != 1 || loc.State != "unknown" || !loc.DoneAt.IsZero() {
					t.Fatalf("job --json without retention: exit %d %s", jcode, jout)
				}
				return
			}
			if code != 0 || !regexp.MustCompile(`^job `+id+`: done at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(\d+s ago\)\n$`).MatchString(out) {
				t.Fatalf("job: exit %d, stdout %q, stderr %q; want done", code, out, errOut)
			}
			if jcode != 0 || loc.ID != id || loc.State != "done" || loc.DoneAt.Before(before.Add(-time.Second)) || time.Since(loc.DoneAt) > time.Minute {
				t.Fatalf("job --json: exit %d %s; want done since %s", jcode, jout, before.Format(time.RFC3339Nano))
			}
		})
	}
}
