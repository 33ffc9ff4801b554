package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestJobNamesHolderPID: baton job names the pid of the holder running a
// job, and the job's own process, for every job of a holder with
// concurrency 2 (its record names only the latest) and for a holder whose
// host is set (BATON_HOST: its consumer is that host's, not the machine's
// hostname), in text and JSON.
func TestJobNamesHolderPID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		jobs int
		env  []string
	}{
		{"concurrency 2", 2, nil},
		{"BATON_HOST set", 1, []string{"BATON_HOST=web-7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			r.extraEnv = tc.env
			var ids []string
			for i := range tc.jobs {
				out, errOut, code := r.baton("enqueue", "job"+strconv.Itoa(i))
				if code != 0 {
					t.Fatalf("enqueue: exit %d %s", code, errOut)
				}
				ids = append(ids, strings.TrimSpace(out))
			}
			// Each job writes its pid, then becomes sleep (same pid).
			job := r.script("job.sh", `echo $$ > "`+r.dir+`/$BATON_JOB_ID.pid"; exec sleep 30`)
			h := r.start("run", "--concurrency", strconv.Itoa(tc.jobs), "--lifetime", "40s", "--shutdown-grace", "500ms", "--standby-slots", "0", "--", job)
			jobPIDs := map[string]int{}
			for _, id := range ids {
				eventually(t, 15*time.Second, "job "+id+" has started", func() bool {
					b, err := os.ReadFile(filepath.Join(r.dir, id+".pid"))
					jobPIDs[id], _ = strconv.Atoi(strings.TrimSpace(string(b)))
					return err == nil && jobPIDs[id] > 0
				})
			}
			for _, id := range ids {
				asked := []string{"job", "--lock-dir", r.locks, id}
				want := []string{"running on ", fmt.Sprintf(", pid %d", h.cmd.Process.Pid), fmt.Sprintf("the job's process is pid %d", jobPIDs[id])}
				out, _, _ := r.baton(asked...)
				// The record is rewritten every 500ms: give it a few.
				for end := time.Now().Add(5 * time.Second); !containsAll(out, want) && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
					out, _, _ = r.baton(asked...)
				}
				if !containsAll(out, want) {
					t.Errorf("baton job %s: %q, want %q", id, out, want)
					continue
				}
				jout, _, _ := r.baton(append(asked, "--json")...)
				var loc struct {
					State  string
					PID    int
					JobPID int `json:"job_pid"`
				}
				if err := json.Unmarshal([]byte(jout), &loc); err != nil || loc.State != "running" || loc.PID != h.cmd.Process.Pid || loc.JobPID != jobPIDs[id] {
					t.Errorf("job --json: %v %s, want pid %d and job_pid %d", err, jout, h.cmd.Process.Pid, jobPIDs[id])
				}
			}
			_ = h.cmd.Process.Signal(syscall.SIGTERM)
			h.wait(t, 15*time.Second)
		})
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
