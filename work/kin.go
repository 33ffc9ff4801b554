package work

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/baton-run/baton/internal/proc"
	"github.com/rs/zerolog"
)

// ownEnv names baton's own variables: never passed to children. The first
// three are baton's configuration (a Redis URL may hold a password, and the
// Sentinels' password is one); the others are set per child, so inherited
// values are dropped.
var ownEnv = []string{"BATON_REDIS_URL", "BATON_REDIS_SENTINEL_PASSWORD", "BATON_SPAWNED", proc.EnvHolder, envRun,
	"BATON_JOB_ID", "BATON_ATTEMPT", "BATON_QUEUE", "BATON_SLOT", envProtocol, "BATON_TICK", "BATON_PERIODIC",
	"TRACEPARENT", "TRACESTATE", envResultFile, envProgressFD, "BATON_KEY"}

// envRun names a child's run number, unique among one holder's children:
// it tells which child an adopted orphan came from.
const envRun = "BATON_RUN"

// jobEnv is os.Environ without baton's own variables, nor those that env
// sets, followed by env (NAME=value each).
func jobEnv(env []string) []string {
	var out []string
next:
	for _, kv := range os.Environ() {
		for _, name := range ownEnv {
			if strings.HasPrefix(kv, name+"=") {
				continue next
			}
		}
		for _, set := range env {
			if name, _, _ := strings.Cut(set, "="); strings.HasPrefix(kv, name+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return append(out, env...)
}

// kin is what the exec and persistent handlers share about the processes
// they start: the environment children inherit, their process groups (for
// KillAll), and the run marks of those still running (for killOrphans).
type kin struct {
	env  []string     // the environment children inherit; built once
	once sync.Once    // builds env
	runs atomic.Int64 // the last BATON_RUN given

	mu     sync.Mutex
	groups map[int]struct{}    // live process groups, for KillAll
	live   map[string]struct{} // "BATON_RUN=n" of running children
	killed bool                // KillAll was called: a group tracked after it dies at once
}

// prepare sets cmd's environment (baton's own minus its secrets, plus the
// handler's Env, BATON_QUEUE, BATON_SLOT, extra, and, when holder is set,
// BATON_HOLDER and a fresh BATON_RUN) and its own process group with
// Pdeathsig=SIGKILL. It returns the run mark ("" without a holder). The
// environment up to Env is built once, on the first call.
func (k *kin) prepare(cmd *exec.Cmd, base []string, holder, queue, slot string, extra ...string) (run string) {
	k.once.Do(func() { k.env = jobEnv(base) })
	env := make([]string, len(k.env), len(k.env)+len(extra)+4)
	copy(env, k.env)
	env = append(env, "BATON_QUEUE="+queue, "BATON_SLOT="+slot)
	env = append(env, extra...)
	if holder != "" {
		run = envRun + "=" + strconv.FormatInt(k.runs.Add(1), 10)
		env = append(env, proc.EnvHolder+"="+holder, run)
	}
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return run
}

// track records a child's process group (pgid > 0) and run mark (run != "")
// as live or gone.
func (k *kin) track(pgid int, run string, live bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.groups == nil {
		k.groups, k.live = map[int]struct{}{}, map[string]struct{}{}
	}
	switch {
	case live && pgid > 0 && k.killed:
		// Started as KillAll ran, between the fork and this call.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	case live && pgid > 0:
		k.groups[pgid] = struct{}{}
	case live && run != "":
		k.live[run] = struct{}{}
	default:
		delete(k.groups, pgid)
		delete(k.live, run)
	}
}

// killOrphans kills the processes adopted from this holder's children that
// are no longer running: a child's orphans die with it, a running child's
// stay. Only the holder's own children are looked at (proc.KillOrphans),
// and, among them, only processes carrying this holder's token.
func (k *kin) killOrphans(holder string, log zerolog.Logger) {
	if holder == "" || !proc.Subreaper() {
		return
	}
	mark := []byte(proc.EnvHolder + "=" + holder)
	n := proc.KillOrphans(func(env []byte) bool {
		if !proc.EnvHas(env, mark) {
			return false
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		for run := range k.live {
			if proc.EnvHas(env, []byte(run)) {
				return false
			}
		}
		return true
	})
	if n > 0 {
		log.Debug().Int("processes", n).Msg("killed what finished jobs left running")
	}
}

// KillAll sends SIGKILL to every running child's process group, and to
// every one started after it: for leaving at once (hard deadline, second
// signal) with nothing left behind, even a child forked as it ran.
func (k *kin) KillAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.killed = true
	for pgid := range k.groups {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// envProtocol tells a persistent child which worker protocol version to
// speak on fds 3 and 4 (docs/workers.md).
const envProtocol = "BATON_PROTOCOL"
