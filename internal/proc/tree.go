//go:build linux

package proc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// Stat is what baton reads of one process from /proc/<pid>/stat.
type Stat struct {
	PID   int
	PPID  int
	PGID  int
	State byte   // R, S, D, T (stopped), Z, ...
	Start uint64 // clock ticks since boot: with PID, one process for life
}

// ReadStat parses /proc/<pid>/stat; ErrNoProcess when pid is gone or a zombie.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if os.IsNotExist(err) {
			return Stat{}, ErrNoProcess
		}
		return Stat{}, err
	}
	return parseStat(pid, b)
}

func parseStat(pid int, b []byte) (Stat, error) {
	// comm (field 2) may hold spaces and parens: fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state), f[1] ppid, f[2] pgrp, f[19] starttime.
	if len(f) < 20 {
		return Stat{}, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	s := Stat{PID: pid, State: f[0][0]}
	if s.State == 'Z' || s.State == 'X' {
		return Stat{}, ErrNoProcess
	}
	var err error
	if s.PPID, err = strconv.Atoi(string(f[1])); err != nil {
		return Stat{}, fmt.Errorf("parse /proc/%d/stat: ppid: %w", pid, err)
	}
	if s.PGID, err = strconv.Atoi(string(f[2])); err != nil {
		return Stat{}, fmt.Errorf("parse /proc/%d/stat: pgrp: %w", pid, err)
	}
	if s.Start, err = strconv.ParseUint(string(f[19]), 10, 64); err != nil {
		return Stat{}, fmt.Errorf("parse /proc/%d/stat: starttime: %w", pid, err)
	}
	return s, nil
}

// All returns every live process (zombies left out).
func All() ([]Stat, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := make([]Stat, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := ReadStat(pid); err == nil {
			out = append(out, s)
		}
	}
	return out, nil
}

// Descendants returns every live descendant of pid (not pid itself), found by
// following parent links in one snapshot of /proc. A process that was
// reparented away from pid's tree (to init, or to another subreaper) is no
// longer its descendant; make the ancestor a child subreaper to keep them.
func Descendants(pid int) ([]Stat, error) {
	return descendantsExcept(pid, nil)
}

// descendantsExcept is Descendants without the processes spare says to
// leave, and without their own descendants.
func descendantsExcept(pid int, spare func(int) bool) ([]Stat, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	return descendantsOf(pid, all, spare), nil
}

func descendantsOf(pid int, all []Stat, spare func(int) bool) []Stat {
	children := map[int][]Stat{}
	for _, s := range all {
		children[s.PPID] = append(children[s.PPID], s)
	}
	var out []Stat
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if spare != nil && spare(c.PID) {
				continue
			}
			out = append(out, c)
			queue = append(queue, c.PID)
		}
	}
	return out
}

// KillTree sends SIGKILL to pid, when it still is the process that started
// at start, and to all its descendants, and returns how many it signalled.
// The descendants are stopped first (SIGSTOP) so none can fork while it
// looks; it looks again until a pass finds nothing new.
func KillTree(pid int, start uint64) int { return len(killTree(pid, start, nil)) }

// KillTreeExcept is KillTree sparing the descendants for which spare is
// true, with their own descendants: a frozen holder's detached siblings
// (candidates it spawned, which may hold slots of their own) are its
// children but not its work.
func KillTreeExcept(pid int, start uint64, spare func(int) bool) int {
	return len(killTree(pid, start, spare))
}

// stopDescendants stops pid's live descendants but spared ones' trees and
// returns them: passes until one finds none new (a process forking as it
// is stopped shows up in the next), five at most.
func stopDescendants(pid int, spare func(int) bool) map[int]bool {
	seen := map[int]bool{}
	for pass := 0; pass < 5; pass++ {
		ds, err := descendantsExcept(pid, spare)
		if err != nil {
			break
		}
		fresh := 0
		for _, d := range ds {
			if !seen[d.PID] {
				seen[d.PID] = true
				fresh++
				_ = syscall.Kill(d.PID, syscall.SIGSTOP)
			}
		}
		if fresh == 0 {
			break
		}
	}
	return seen
}

// killTree is KillTreeExcept, returning the pids it signalled.
func killTree(pid int, start uint64, spare func(int) bool) []int {
	if !Alive(pid, start) {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	seen := stopDescendants(pid, spare)
	var out []int
	for p := range seen {
		if syscall.Kill(p, syscall.SIGKILL) == nil {
			out = append(out, p)
		}
	}
	if Alive(pid, start) && syscall.Kill(pid, syscall.SIGKILL) == nil {
		out = append(out, pid)
	}
	return out
}
