package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/cli"
	"github.com/baton-run/baton/internal/faultproxy"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"github.com/rogpeppe/go-internal/testscript"
)

// asBaton makes the test binary behave as baton, so tests start real baton
// processes (spawned candidates re-exec it with the same environment).
const asBaton = "BATON_TEST_AS_BATON"

// testHandler picks a library-mode handler for the baton under test.
const testHandler = "BATON_TEST_HANDLER"

func TestMain(m *testing.M) {
	if os.Getenv(asBaton) == "1" {
		var o cli.Options
		switch os.Getenv(testHandler) {
		case "noop":
			o.Handler = work.HandlerFunc(func(context.Context, *work.Job) error { return nil })
		case "hang":
			o.Handler = work.HandlerFunc(func(context.Context, *work.Job) error { select {} })
		case "until-cancelled": // waits for its context, and writes its cause to the file the payload names
			o.Handler = work.HandlerFunc(func(ctx context.Context, j *work.Job) error {
				<-ctx.Done()
				_ = os.WriteFile(string(j.Payload), []byte(context.Cause(ctx).Error()), 0o644)
				return context.Cause(ctx)
			})
		}
		os.Exit(cli.Main(context.Background(), os.Args[1:], o))
	}
	testscript.Main(m, map[string]func(){
		"baton": func() { os.Exit(cli.Main(context.Background(), os.Args[1:], cli.Options{})) },
	})
}

// TestScripts runs the CLI scripts in testdata/script, each against its own
// redis-server ($BATON_REDIS_URL) and lock dir ($LOCKS).
func TestScripts(t *testing.T) {
	t.Parallel()
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			srv := redistest.Start(env.T().(testing.TB))
			env.Setenv("BATON_REDIS_URL", srv.URL())
			env.Setenv("LOCKS", filepath.Join(env.WorkDir, "locks"))
			env.Setenv("NL", "a\nb")                       // enqueue_keys.txt
			env.Setenv("LONG", strings.Repeat("k", 10000)) // enqueue_keys.txt
			return nil
		},
	})
}

// rig is one test's Redis, lock dir and baton processes.
type rig struct {
	t     *testing.T
	redis *redistest.Server
	dir   string
	locks string
	// extraEnv is added to every baton the rig starts.
	extraEnv []string
	mu       sync.Mutex
	procs    []*process

	rdbOnce sync.Once
	rdb     *redis.Client // client, shared by the rig's many reads
}

// client is one Redis client for the test's own reads: a new one per poll
// would dial again each time, and keep every connection open until the end.
func (r *rig) client() *redis.Client {
	r.rdbOnce.Do(func() { r.rdb = r.redis.Client() })
	return r.rdb
}

type process struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	done   chan struct{}
	start  time.Time
	end    time.Time
	mu     sync.Mutex
}

func newRig(t *testing.T, opts ...redistest.Option) *rig {
	r := rigOn(t, redistest.Start(t, opts...))
	r.fresh("default")
	return r
}

// fresh marks the rig's new Redis as never having served queues
// (lock.MarkFresh): their first lease grants are not paused as after a
// restart that lost the leases. A server that refuses (at maxmemory) is
// left as it is.
func (r *rig) fresh(queues ...string) {
	r.t.Helper()
	for _, q := range queues {
		if _, err := lock.MarkFresh(context.Background(), r.client(), q); err != nil {
			r.t.Logf("redis not marked fresh for queue %s: %v", q, err)
		}
	}
}

// rigOn is a rig on a Redis already started.
func rigOn(t *testing.T, srv *redistest.Server) *rig {
	r := &rig{t: t, redis: srv, dir: t.TempDir()}
	r.locks = filepath.Join(r.dir, "locks")
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, p := range r.procs {
			if p.cmd.Process != nil {
				_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
			}
			<-p.done
		}
	})
	return r
}

// script writes an executable shell script into the rig's dir.
func (r *rig) script(name, body string) string {
	p := filepath.Join(r.dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		r.t.Fatal(err)
	}
	return p
}

func (r *rig) env() []string {
	return append(append(os.Environ(), asBaton+"=1", "BATON_REDIS_URL="+r.redis.URL()), r.extraEnv...)
}

// start starts `baton args...` with the rig's Redis and lock dir.
func (r *rig) start(args ...string) *process {
	r.t.Helper()
	return r.startCmd(r.cmd(append([]string{args[0], "--log-format", "json"}, args[1:]...)...))
}

// startCmd starts cmd as a process of the rig; its stderr goes to log
// unless cmd.Stderr is set.
func (r *rig) startCmd(cmd *exec.Cmd) *process {
	r.t.Helper()
	p := &process{cmd: cmd, stderr: new(bytes.Buffer), done: make(chan struct{})}
	if cmd.Stderr == nil { // else the test reads it, and log is empty
		cmd.Stderr = lockedWriter{&p.mu, p.stderr}
	}
	// Spawned candidates inherit stderr: do not wait for them to close it.
	cmd.WaitDelay = 500 * time.Millisecond
	p.start = time.Now()
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		p.end = time.Now()
		close(p.done)
	}()
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
	return p
}

// serve starts `baton args... --listen 127.0.0.1:0` (web, metrics) and
// returns it with the address it serves, read from its log: a port taken
// from a closed listener could be another test's by the time it listens.
func (r *rig) serve(args ...string) (*process, string) {
	r.t.Helper()
	p := r.startCmd(r.cmd(append(args, "--listen", "127.0.0.1:0")...))
	served := regexp.MustCompile(`http://(127\.0\.0\.1:[0-9]+)/`)
	var addr string
	eventually(r.t, 10*time.Second, "baton "+args[0]+" says where it serves", func() bool {
		if m := served.FindStringSubmatch(p.log()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	return p, addr
}

// proxy starts a fault proxy in front of the rig's Redis, closed when the
// test ends: point a baton at it to cut, hold or delay its traffic.
func (r *rig) proxy() *faultproxy.Proxy {
	r.t.Helper()
	px, err := faultproxy.Start(r.redis.Addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = px.Close() })
	return px
}

// cmd prepares `baton args...` with the rig's Redis and, for the commands
// that use slots, its lock dir.
func (r *rig) cmd(args ...string) *exec.Cmd {
	if args[0] == "run" || args[0] == "status" || args[0] == "check" {
		args = append([]string{args[0], "--lock-dir", r.locks}, args[1:]...)
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = r.env()
	return cmd
}

// baton runs `baton args...` to completion: stdout, stderr, exit code.
func (r *rig) baton(args ...string) (string, string, int) {
	r.t.Helper()
	cmd := r.cmd(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		r.t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

type slotJSON struct {
	Slot     int    `json:"slot"`
	Held     bool   `json:"held"`
	NoRecord bool   `json:"no_record"`
	PID      int    `json:"pid"`
	JobsDone int64  `json:"jobs_done"`
	Job      string `json:"job"`
}

type statusJSON struct {
	Run, Standby []slotJSON
	Jobs         *struct{ Waiting, Pending, Scheduled, Done int64 }
}

func (r *rig) status(args ...string) statusJSON {
	r.t.Helper()
	var s statusJSON
	r.statusInto(&s, args...)
	return s
}

// statusInto decodes `baton status --json args...` into v.
func (r *rig) statusInto(v any, args ...string) {
	r.t.Helper()
	out, errOut, code := r.baton(append([]string{"status", "--json"}, args...)...)
	if code != 0 {
		r.t.Fatalf("status exit %d: %s", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		r.t.Fatalf("status json: %v\n%s", err, out)
	}
}

func held(ss []slotJSON) (n int) {
	for _, s := range ss {
		if s.Held {
			n++
		}
	}
	return n
}

// exited reports whether p has exited, and its code.
func (p *process) exited() (bool, int) {
	select {
	case <-p.done:
		return true, p.cmd.ProcessState.ExitCode()
	default:
		return false, 0
	}
}

func (p *process) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("pid %d still running after %v\n%s", p.cmd.Process.Pid, within, p.log())
		return -1
	}
}

func (p *process) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// eventually polls cond every 10ms until it holds or within passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(within); ; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s", within, what)
		}
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
