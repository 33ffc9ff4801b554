package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/baton-run/baton/lock"
	"github.com/redis/go-redis/v9"
)

// binaries are the programs the process-level groups start: the real baton
// (exec mode, what cron runs) and batonbench (cli.Main with a built-in
// handler that records job starts).
type binaries struct {
	dir, baton, batonbench string
}

// build compiles both programs once into a temp dir, from this module: the
// bench must run in its own directory (make bench and go run . do), so that
// ../ is the baton tree being measured.
func build(ctx context.Context) (*binaries, error) {
	if _, err := os.Stat(filepath.Join("cmd", "batonbench", "main.go")); err != nil {
		return nil, errors.New("run the bench from its directory, bench/ (make bench does): it builds ./cmd/batonbench and ../cmd/baton")
	}
	dir, err := os.MkdirTemp("", "baton-bench-bin-")
	if err != nil {
		return nil, err
	}
	b := &binaries{dir: dir, baton: filepath.Join(dir, "baton"), batonbench: filepath.Join(dir, "batonbench")}
	for out, pkg := range map[string]string{b.baton: "github.com/baton-run/baton/cmd/baton", b.batonbench: "./cmd/batonbench"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
		if msg, err := cmd.CombinedOutput(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("go build %s: %v\n%s", pkg, err, msg)
		}
	}
	return b, nil
}

func (b *bench) binaries(ctx context.Context) (*binaries, error) {
	if b.bins != nil {
		return b.bins, nil
	}
	progress("building baton and batonbench")
	bins, err := build(ctx)
	b.bins = bins
	return bins, err
}

// scene is one process-level measurement: a lock dir, a marks file, a queue
// and the baton processes started in it, all removed by close.
type scene struct {
	dir, marks, queue string
	srv               *redisServer
	procs             []*exec.Cmd
	logs              []*os.File
	// hosts, when set, makes the scene a fleet (lock_backend redis): the
	// i-th candidate started runs as simulated host hosts[i % len(hosts)],
	// with its own lock dir, and holderPID reads the leases in Redis.
	hosts  []string
	leases *redis.Client
}

func newScene(srv *redisServer, queue string) (*scene, error) {
	dir, err := os.MkdirTemp("", "baton-bench-")
	if err != nil {
		return nil, err
	}
	return &scene{dir: dir, marks: filepath.Join(dir, "marks"), queue: queue, srv: srv}, nil
}

// args are `baton run` flags for this scene, then extra; logging and every
// other setting keep baton's defaults unless extra says otherwise.
func (s *scene) args(extra ...string) []string {
	return append([]string{"run", "--queue", s.queue, "--redis-url", s.srv.URL(),
		"--lock-dir", filepath.Join(s.dir, "locks")}, extra...)
}

// fleet makes s a fleet of the simulated hosts; call it after fill, whose
// FLUSHALL takes the fresh mark with it.
func (s *scene) fleet(hosts ...string) {
	s.hosts = hosts
	s.leases = s.srv.Client(2)
	// The bench's Redis was just flushed: grants would wait a lease TTL,
	// as after any loss of the lease state.
	_, _ = lock.MarkFresh(context.Background(), s.leases, s.queue)
}

// hostArgs are the flags of the n-th candidate's host in a fleet scene
// (none otherwise); they go before the extra args' "--".
func (s *scene) hostArgs(n int) []string {
	if len(s.hosts) == 0 {
		return nil
	}
	h := s.hosts[n%len(s.hosts)]
	return []string{"--lock-backend", "redis", "--host", h, "--lock-dir", filepath.Join(s.dir, "locks-"+h)}
}

// start starts bin with args; its stderr goes to a log file in the scene.
func (s *scene) start(bin string, args []string) (*exec.Cmd, error) {
	log, err := os.Create(filepath.Join(s.dir, "proc-"+strconv.Itoa(len(s.procs))+".log"))
	if err != nil {
		return nil, err
	}
	args = withFlags(args, s.hostArgs(len(s.procs)))
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "BATON_BENCH_MARKS="+s.marks)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, err
	}
	s.procs = append(s.procs, cmd)
	s.logs = append(s.logs, log)
	return cmd, nil
}

// close ends every process still running (SIGKILL) and removes the scene.
func (s *scene) close() {
	for _, c := range s.procs {
		if c.ProcessState == nil {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	for _, l := range s.logs {
		_ = l.Close()
	}
	if s.leases != nil {
		_ = s.leases.Close()
	}
	_ = os.RemoveAll(s.dir)
}

// withFlags puts flags into args before a "--" (or at the end).
func withFlags(args, flags []string) []string {
	if len(flags) == 0 {
		return args
	}
	i := slices.Index(args, "--")
	if i < 0 {
		i = len(args)
	}
	return slices.Concat(args[:i], flags, args[i:])
}

// stop sends SIGTERM (drain) and waits up to 30 s, then SIGKILL.
func stop(c *exec.Cmd) error {
	if c.ProcessState != nil {
		return nil
	}
	_ = c.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		_ = c.Process.Kill()
		<-done
		return errors.New("did not drain in 30s after SIGTERM")
	}
}

// logTail is the end of process i's log, for error messages.
func (s *scene) logTail(i int) string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "proc-"+strconv.Itoa(i)+".log"))
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	return strings.TrimSpace(string(b))
}

// holderPID reads the pid in slot i's record of role ("run" or "standby"),
// without locking, as baton status does; 0 when free.
func (s *scene) holderPID(role string, i int) int {
	if s.leases != nil {
		set, err := lock.NewLeaseSet(s.leases, s.queue, role, i+1, lock.LeaseOptions{})
		if err != nil {
			return 0
		}
		rs, err := set.Records()
		if err != nil || !rs[i].Held {
			return 0
		}
		return rs[i].PID
	}
	b, err := os.ReadFile(filepath.Join(s.dir, "locks", s.queue+"."+role+"."+strconv.Itoa(i)+".json"))
	if err != nil {
		return 0
	}
	var r struct {
		Held bool `json:"held"`
		PID  int  `json:"pid"`
	}
	if json.Unmarshal(b, &r) != nil || !r.Held {
		return 0
	}
	return r.PID
}

// waitFor polls cond every millisecond until it holds or d passes.
func waitFor(d time.Duration, what string, cond func() bool) error {
	for end := time.Now().Add(d); ; time.Sleep(time.Millisecond) {
		if cond() {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("%s: not within %s", what, d)
		}
	}
}

// mark is one line of the marks file: a job started (S) or ended (E).
type mark struct {
	Kind    string
	PID     int
	At      time.Time
	Job     string
	Attempt int
}

// marks tails the marks file.
type marks struct {
	path string
	off  int64
	all  []mark
}

// poll reads the lines appended since the last call.
func (m *marks) poll() []mark {
	f, err := os.Open(m.path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(m.off, io.SeekStart); err != nil {
		return nil
	}
	r := bufio.NewReader(f)
	var fresh []mark
	for {
		line, err := r.ReadString('\n')
		if err != nil { // a partial line is read again next time
			break
		}
		m.off += int64(len(line))
		var k mark
		var ns int64
		if _, err := fmt.Sscan(line, &k.Kind, &k.PID, &ns, &k.Job, &k.Attempt); err == nil {
			k.At = time.Unix(0, ns)
			fresh = append(fresh, k)
		}
	}
	m.all = append(m.all, fresh...)
	return fresh
}

// first returns the first mark that matches, polling for up to d.
func (m *marks) first(d time.Duration, what string, match func(mark) bool) (mark, error) {
	for _, k := range m.all {
		if match(k) {
			return k, nil
		}
	}
	var found mark
	err := waitFor(d, what, func() bool {
		for _, k := range m.poll() {
			if match(k) {
				found = k
				return true
			}
		}
		return false
	})
	return found, err
}

// last returns the latest mark of kind by pid read so far.
func (m *marks) last(kind string, pid int) (mark, bool) {
	for i := len(m.all) - 1; i >= 0; i-- {
		if k := m.all[i]; k.Kind == kind && k.PID == pid {
			return k, true
		}
	}
	return mark{}, false
}
