package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/work"
)

// examplePath is a file under examples/ at the repository's root.
func examplePath(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "examples", rel))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func python(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is needed for the persistent worker tests (apt-get install python3)")
	}
	return py
}

// TestPersistentPythonExample: the Python example drains a queue at
// concurrency 2, its output is logged, and at the end of the lifetime each
// child gets stop and the holder exits 0 without waiting out the grace.
func TestPersistentPythonExample(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const jobs = 300
	var in strings.Builder
	for i := 0; i < jobs; i++ {
		in.WriteString("job-" + strconv.Itoa(i) + "\n")
	}
	cmd := r.cmd("enqueue", "-q")
	cmd.Stdin = strings.NewReader(in.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("enqueue: %v %s", err, out)
	}
	h := r.start("run", "--persistent", "--concurrency", "2", "--lifetime", "6s", "--jitter", "1ms", "--shutdown-grace", "20s",
		"--", python(t), examplePath(t, "python/example_worker.py"))
	if code := h.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d: %s", code, h.log())
	}
	if took := h.end.Sub(h.start); took > 16*time.Second {
		t.Fatalf("holder took %s: the children should exit on stop, not at the grace", took)
	}
	if s := r.status(); s.Jobs.Done != jobs || s.Jobs.Pending != 0 || s.Jobs.Waiting != 0 {
		t.Fatalf("jobs %+v", *s.Jobs)
	}
	if log := h.log(); !strings.Contains(log, "JOB-299") || !strings.Contains(log, `"child":`) {
		t.Fatalf("the children's output is not in the log:\n%s", log)
	}
}

// TestPersistentShellWorker: the shell worker of the docs gets every byte of
// a binary payload and the environment of an exec job, without baton's
// secrets; its children die with a holder killed by kill -9.
func TestPersistentShellWorker(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.extraEnv = []string{"BATON_SPAWNED=1"}
	out := filepath.Join(r.dir, "out")
	handler := r.script("handle.sh", `cat > `+out+`.payload; env > `+out+`.env; echo $PPID > `+out+`.pid
[ "$(wc -c < `+out+`.payload)" -lt 1000 ] || sleep 60
`)
	payload := []byte("\x00\xff\n{\"type\":\"stop\"}\n\r\n")
	if _, err := work.Enqueue(t.Context(), r.redis.Client(), "default", payload); err != nil {
		t.Fatal(err)
	}
	h := r.start("run", "--persistent", "--lifetime", "1m", "--", examplePath(t, "shell/worker.sh"), handler)
	eventually(t, 10*time.Second, "job done", func() bool { return r.status().Jobs.Done == 1 })
	if got, _ := os.ReadFile(out + ".payload"); !bytes.Equal(got, payload) {
		t.Fatalf("payload %q, want %q", got, payload)
	}
	env, _ := os.ReadFile(out + ".env")
	for _, bad := range []string{"BATON_REDIS_URL=", "BATON_SPAWNED="} {
		if bytes.Contains(env, []byte(bad)) {
			t.Errorf("worker environment holds %q", bad)
		}
	}
	for _, good := range []string{"BATON_QUEUE=default", "BATON_SLOT=", "BATON_HOLDER=", "BATON_PROTOCOL=1"} {
		if !bytes.Contains(env, []byte(good)) {
			t.Errorf("worker environment lacks %q", good)
		}
	}
	// A long job, then kill -9 the holder: the worker dies with it.
	if _, err := work.Enqueue(t.Context(), r.redis.Client(), "default", bytes.Repeat([]byte("x"), 2000)); err != nil {
		t.Fatal(err)
	}
	var worker int
	eventually(t, 10*time.Second, "long job started", func() bool {
		b, _ := os.ReadFile(out + ".payload")
		pid, _ := os.ReadFile(out + ".pid")
		worker, _ = strconv.Atoi(strings.TrimSpace(string(pid)))
		return len(b) == 2000 && worker > 0
	})
	_ = h.cmd.Process.Signal(syscall.SIGKILL)
	h.wait(t, 5*time.Second)
	eventually(t, 5*time.Second, "the worker died with its holder", func() bool { return gone(worker) })
}

// TestPersistentWorkerCannotStart: exit 1 with the worker's stderr, after a
// few tries with backoff; the job stays queued.
func TestPersistentWorkerCannotStart(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.baton("enqueue", "x")
	h := r.start("run", "--persistent", "--lifetime", "1m", "--", python(t), "-c", "import no_such_module_here")
	if code := h.wait(t, 20*time.Second); code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, h.log())
	}
	if log := h.log(); !strings.Contains(log, "failed to start 3 times in a row") || !strings.Contains(log, "No module named 'no_such_module_here'") {
		t.Fatalf("log lacks the cause:\n%s", log)
	}
	if s := r.status(); s.Jobs.Waiting != 1 || s.Jobs.Pending != 0 {
		t.Fatalf("jobs %+v, want the job waiting", *s.Jobs)
	}
}

// TestPersistentStatusChildren: a persistent holder's record lists its
// children (pid, jobs served, RSS), and status shows them under its slot,
// with flock slots and with fleet leases.
func TestPersistentStatusChildren(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"file", "redis"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			statusChildren(t, "--lock-backend", backend)
		})
	}
}

func statusChildren(t *testing.T, backend ...string) {
	r := newRig(t)
	const jobs = 20
	cmd := r.cmd("enqueue", "-q")
	cmd.Stdin = strings.NewReader(strings.Repeat("x\n", jobs))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("enqueue: %v %s", err, out)
	}
	h := r.start(append(append([]string{"run"}, backend...), "--persistent", "--concurrency", "2", "--lifetime", "30s", "--jitter", "1ms",
		"--", python(t), examplePath(t, "python/example_worker.py"))...)
	type child struct {
		PID  int   `json:"pid"`
		Jobs int64 `json:"jobs"`
		RSS  int64 `json:"rss_bytes"`
	}
	var kids []child
	eventually(t, 15*time.Second, "the record lists children that served every job", func() bool {
		out, _, _ := r.baton(append([]string{"status", "--json"}, backend...)...)
		var s struct {
			Run []struct {
				PID      int     `json:"pid"`
				Children []child `json:"children"`
			} `json:"run"`
		}
		if json.Unmarshal([]byte(out), &s) != nil || len(s.Run) == 0 || s.Run[0].PID != h.cmd.Process.Pid {
			return false
		}
		kids = s.Run[0].Children
		var served int64
		for _, k := range kids {
			served += k.Jobs
		}
		return served == jobs
	})
	text, _, _ := r.baton(append([]string{"status"}, backend...)...)
	for _, k := range kids {
		if k.PID <= 0 || !alive(k.PID) || k.RSS <= 0 {
			t.Errorf("child %+v: want a live pid and its RSS", k)
		}
		if !strings.Contains(text, strconv.Itoa(k.PID)) {
			t.Errorf("status does not show child %d:\n%s", k.PID, text)
		}
	}
	if len(kids) == 0 || len(kids) > 2 || !strings.Contains(text, "child") {
		t.Fatalf("children %+v, status:\n%s", kids, text)
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	if code := h.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("exit %d: %s", code, h.log())
	}
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }
