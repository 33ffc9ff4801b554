package lock

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// The kernel's view of who holds what, read from /proc without taking any
// lock (invariant 6). Records are what holders say; these say what is true
// even when a record is missing, unreadable, or names a file no longer linked.

// procLocks is where the kernel lists every file lock on the machine.
var procLocks = "/proc/locks"

// procLocksReads counts reads of procLocks: the first read after a few
// quiet milliseconds waits out an RCU grace period (Guarded), so tests
// check that a guarded take makes none.
var procLocksReads atomic.Int64

// flockEntry is one granted flock from /proc/locks.
type flockEntry struct {
	pid int
	ino uint64 // the locked inode
}

// flocks reads every granted FLOCK lock (waiters, "->" lines, left out).
//
// A line reads "1: FLOCK  ADVISORY  WRITE 4321 08:01:1234567 0 EOF": the
// device is major:minor in hex, the inode in decimal. Only the inode is
// compared: the device there is the superblock's, which is not st_dev on
// btrfs subvolumes or overlayfs; the path or the descriptor link names the file.
func flocks() ([]flockEntry, error) {
	procLocksReads.Add(1)
	b, err := os.ReadFile(procLocks)
	if err != nil {
		return nil, err
	}
	var out []flockEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[1] != "FLOCK" {
			continue // POSIX, OFDLCK, LEASE, or a "->" waiter
		}
		pid, err := strconv.Atoi(f[4])
		if err != nil {
			continue
		}
		parts := strings.Split(f[5], ":")
		if len(parts) != 3 {
			continue
		}
		ino, err := strconv.ParseUint(parts[2], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, flockEntry{pid: pid, ino: ino})
	}
	return out, nil
}

// FlockHolders returns the pids holding a flock on any file now, per
// /proc/locks: baton's holders, standbys and candidates among them. Empty
// when /proc/locks cannot be read.
func FlockHolders() map[int]bool {
	fl, _ := flocks()
	out := make(map[int]bool, len(fl))
	for _, e := range fl {
		out[e.pid] = true
	}
	return out
}

// flockOwner returns the pid holding a flock on the inode path names now, if
// any. It never opens path.
func flockOwner(path string, fl []flockEntry) (int, bool) {
	var st syscall.Stat_t
	if syscall.Lstat(path, &st) != nil {
		return 0, false
	}
	for _, e := range fl {
		if e.ino == st.Ino {
			return e.pid, true
		}
	}
	return 0, false
}

// deletedHolders reports which of paths (by index) an inode they used to
// name is flocked by a live process other than skip: one that still has it
// open as "<path> (deleted)". Such a process took the slot before the file
// was unlinked, and the kernel still counts its lock (flock belongs to the
// open file description, and unlink does not close it).
func deletedHolders(paths []string, skip int) (map[int]bool, error) {
	fl, err := flocks()
	if err != nil {
		return nil, err
	}
	held := map[int]bool{}
	for i, path := range paths {
		var current syscall.Stat_t
		haveCurrent := syscall.Lstat(path, &current) == nil
		for _, e := range fl {
			if e.pid == skip || haveCurrent && e.ino == current.Ino {
				continue
			}
			if holdsPath(e, path+" (deleted)") {
				held[i] = true
				break
			}
		}
	}
	return held, nil
}

// holdsPath reports whether e's process has a descriptor that links to name
// and is open on e's locked inode.
func holdsPath(e flockEntry, name string) bool {
	dir := "/proc/" + strconv.Itoa(e.pid) + "/fd/"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, d := range ents {
		if link, err := os.Readlink(dir + d.Name()); err != nil || link != name {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(dir+d.Name(), &st) == nil && st.Ino == e.ino {
			return true
		}
	}
	return false
}

// holdsSlot reports whether pid holds a flock on the file at path, or on a
// file that path named before it was unlinked.
func holdsSlot(pid int, path string) bool {
	fl, err := flocks()
	if err != nil {
		return false
	}
	for _, e := range fl {
		if e.pid != pid {
			continue
		}
		if holdsPath(e, path) || holdsPath(e, path+" (deleted)") {
			return true
		}
	}
	return false
}
