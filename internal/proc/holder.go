//go:build linux

package proc

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
)

// EnvHolder names the variable that carries a holder's token into every job
// it starts: BATON_HOLDER=<token>.
const EnvHolder = "BATON_HOLDER"

// NewToken returns 128 random bits in hex: a holder's token, unique to one
// tenure of one slot of one lock dir.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b[:])
}

// KillHolderLeftovers kills, with their process trees, the processes whose
// environment holds BATON_HOLDER=token, and returns how many it killed. A
// holder calls it with the token of the slot's previous holder when that one
// died holding the slot: Pdeathsig kills only a dead holder's direct child,
// and what that child started was reparented away. The token is random and
// was only ever given to that holder's jobs, so another deployment's jobs
// (same queue name, same slot name, another lock dir) are never touched.
// Processes whose environment it may not read are not ours and are skipped,
// and so are those spare says to keep, with their subtrees: a job may have
// started a baton holder of its own (for another queue), which inherited
// the token but is nobody's leftover.
func KillHolderLeftovers(token string, spare func(pid int) bool) int {
	if token == "" {
		return 0
	}
	mark := []byte(EnvHolder + "=" + token)
	self := os.Getpid()
	killed := 0
	// A few passes: a leftover may fork while we look.
	for pass := 0; pass < 3; pass++ {
		ents, err := os.ReadDir("/proc")
		if err != nil {
			break
		}
		n := 0
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self || spared(pid, spare) {
				continue
			}
			env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
			if err != nil || !EnvHas(env, mark) {
				continue
			}
			if start, err := StartTime(pid); err == nil {
				n += KillTreeExcept(pid, start, spare)
			}
		}
		if n == 0 {
			break
		}
		killed += n
	}
	return killed
}

// spared reports whether spare keeps pid or one of its ancestors.
func spared(pid int, spare func(int) bool) bool {
	if spare == nil {
		return false
	}
	for i := 0; i < 64 && pid > 1; i++ {
		if spare(pid) {
			return true
		}
		s, err := ReadStat(pid)
		if err != nil {
			return false
		}
		pid = s.PPID
	}
	return false
}

// EnvHas reports whether environ (NUL-separated, as in /proc/<pid>/environ)
// holds the entry kv ("NAME=value") exactly.
func EnvHas(environ, kv []byte) bool {
	for len(environ) > 0 {
		i := bytes.IndexByte(environ, 0)
		if i < 0 {
			i = len(environ)
		}
		if bytes.Equal(environ[:i], kv) {
			return true
		}
		environ = environ[min(i+1, len(environ)):]
	}
	return false
}

// ChildWithEnv is the pid of the child of parent whose environment holds
// kv ("NAME=value") exactly, the oldest when several do (a job's own
// orphans reparented to its holder inherit its environment); 0 when none
// does or their environments may not be read.
func ChildWithEnv(parent int, kv string) int {
	kids, err := Descendants(parent)
	if err != nil {
		return 0
	}
	found := Stat{}
	for _, k := range kids {
		if k.PPID != parent || found.PID != 0 && k.Start >= found.Start {
			continue
		}
		if env, err := os.ReadFile("/proc/" + strconv.Itoa(k.PID) + "/environ"); err == nil && EnvHas(env, []byte(kv)) {
			found = k
		}
	}
	return found.PID
}
