package proc

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// KillLeftovers sends SIGKILL to every other process whose environment holds
// all of marks (entries such as "BATON_SLOT=host/run-2") and returns how many
// it killed. A holder calls it when it takes a slot: Pdeathsig kills only a
// dead holder's direct child, and this finds what that child left behind
// (a shell script's own children, say). Processes it may not read are not
// ours and are skipped; a process that scrubs its environment escapes.
func KillLeftovers(marks ...string) int {
	self := os.Getpid()
	killed := map[int]bool{}
	// A few passes: a leftover may fork while we look.
	for pass := 0; pass < 3; pass++ {
		ents, err := os.ReadDir("/proc")
		if err != nil {
			break
		}
		n := 0
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self || killed[pid] {
				continue
			}
			env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
			if err != nil || !hasAll(env, marks) {
				continue
			}
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed[pid] = true
				n++
			}
		}
		if n == 0 {
			break
		}
	}
	return len(killed)
}

func hasAll(environ []byte, marks []string) bool {
	for _, m := range marks {
		found := false
		for _, kv := range bytes.Split(environ, []byte{0}) {
			if string(kv) == m {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
