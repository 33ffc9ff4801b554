package main

import (
	"bytes"
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
	h := r.start("run", "--persistent", "--concurrency", "2", "--lifetime", "4s", "--jitter", "1ms", "--shutdown-grace", "20s",
		"--", python(t), examplePath(t, "python/example_worker.py"))
	if code := h.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("exit %d: %s", code, h.log())
	}
	if took := h.end.Sub(h.start); took > 10*time.Second {
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
