package main

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestJobResultAndProgress: an exec job's progress (BATON_PROGRESS_FD)
// shows in `baton job` and status's CURRENT column while it runs; once it
// is done, `baton job --result` writes the raw bytes it wrote to
// BATON_RESULT_FILE (its stdout stays its log), --json carries them
// base64; --result of a job not done exits 1.
func TestJobResultAndProgress(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	out, errOut, code := r.baton("enqueue", "x")
	if code != 0 {
		t.Fatalf("enqueue: exit %d %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	gate := filepath.Join(r.dir, "go")
	job := r.script("job.sh", `echo "42 resizing" >&$BATON_PROGRESS_FD
echo "this is the log, not the result"
while [ ! -e "`+gate+`" ]; do sleep 0.05; done
printf 'raw\000result\n' > "$BATON_RESULT_FILE"`)
	h := r.start("run", "--lifetime", "40s", "--retention", "1m", "--standby-slots", "0", "--", job)

	eventually(t, 15*time.Second, "baton job shows the progress", func() bool {
		out, _, _ := r.baton("job", id)
		return strings.Contains(out, "running on ") && strings.Contains(out, "progress 42% resizing")
	})
	eventually(t, 15*time.Second, "status's CURRENT shows the progress", func() bool {
		out, _, _ := r.baton("status")
		return strings.Contains(out, id+" for ") && strings.Contains(out, "(42% resizing)")
	})
	if _, errOut, code := r.baton("job", "--result", id); code != 1 || !strings.Contains(errOut, "not done") {
		t.Errorf("job --result of a running job: exit %d, %q", code, errOut)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the job is done", func() bool {
		out, _, _ := r.baton("job", id)
		return strings.Contains(out, "done at") && strings.Contains(out, "result of 11 bytes")
	})
	out, errOut, code = r.baton("job", "--result", id)
	if code != 0 || out != "raw\x00result\n" {
		t.Errorf("job --result: exit %d, %q %q", code, out, errOut)
	}
	jout, _, _ := r.baton("job", "--json", id)
	var v struct{ State, Result string }
	if err := json.Unmarshal([]byte(jout), &v); err != nil || v.State != "done" || v.Result != base64.StdEncoding.EncodeToString([]byte("raw\x00result\n")) {
		t.Errorf("job --json: %v %s", err, jout)
	}
	if _, errOut, code := r.baton("job", "--result", "--json", id); code != 2 {
		t.Errorf("--result with --json: exit %d %s, want a usage error", code, errOut)
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	h.wait(t, 15*time.Second)
}
