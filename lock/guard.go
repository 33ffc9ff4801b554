//go:build linux

package lock

import (
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Guarded is a Set that one process waiting long to take a slot (a standby)
// can watch, so that its take costs less than a cold one.
type Guarded interface {
	// Guarded returns a view of the set for the waiting process, and a func
	// that stops watching. The view takes slots as the set does.
	Guarded() (Set, func(), error)
}

var _ Guarded = (*FileSet)(nil)

// Guarded implements Guarded. Every win checks that no live process holds
// a lock on an unlinked file of the slot's path (stillHeld), and that
// check reads /proc/locks. The kernel serves that read under a write lock
// (file_rwsem) that it cannot take without waiting for an RCU grace
// period, unless another read came within a few milliseconds: 6 to 8 ms
// measured, most of a promotion's gap. The view does the check for every
// slot once, now, while its process waits anyway, and watches the lock
// files (inotify: their link count, their moves, the dir itself). A win
// skips the check while nothing was seen to change the file it locked.
//
// The view also reads records without asking the kernel about slots that
// have none (Records would read /proc/locks for them): a slot released a
// moment ago reads as free, and a holder that has not yet published its
// record too, which only costs a failed try.
func (s *FileSet) Guarded() (Set, func(), error) {
	g, err := newGuard(s)
	if err != nil {
		return nil, nil, err
	}
	v := *s
	v.guard = g
	return &v, g.close, nil
}

// guard is one waiter's watch on a set's lock files.
type guard struct {
	mu    sync.Mutex
	fd    int // inotify, non-blocking; read only under mu, never by a goroutine of its own
	dir   int // the watch on the lock dir
	slots []guarded
	none  bool // the dir moved or went, or events were lost: vouch for nothing
}

// guarded is one slot's lock file as the guard saw it.
type guarded struct {
	wd  int    // its inotify watch
	ino uint64 // the inode the path named when the watch began
	ok  bool   // watched, and no holder of an unlinked file of the path when checked
}

func newGuard(s *FileSet) (*guard, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	g := &guard{fd: fd, slots: make([]guarded, s.n)}
	if g.dir, err = unix.InotifyAddWatch(fd, s.dir, unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_ONLYDIR); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	paths := make([]string, s.n)
	for i := range s.n {
		paths[i] = s.Path(i)
		// IN_ATTRIB: unlink, a rename over it and link change the link count.
		wd, err := unix.InotifyAddWatch(fd, paths[i], unix.IN_ATTRIB|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_DONT_FOLLOW)
		if err != nil {
			continue // missing: a win on it checks the kernel
		}
		// Read after the watch began: a change in between is an event.
		if ino, err := inode(paths[i]); err == nil {
			g.slots[i] = guarded{wd: wd, ino: ino, ok: true}
		}
	}
	// Checked after the watches began: a file unlinked later is an event.
	held, err := deletedHolders(paths, os.Getpid())
	if err != nil {
		g.none = true
	}
	for i := range held {
		g.slots[i].ok = false
	}
	return g, nil
}

// vouch reports whether a win of slot i, whose lock file is inode ino (the
// inode its path names now), needs no check of the kernel's locks: the
// guard checked the path when it began, has watched that inode since, and
// no event has touched it or the dir.
func (g *guard) vouch(i int, ino uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.drain()
	return !g.none && i < len(g.slots) && g.slots[i].ok && g.slots[i].ino == ino
}

// drain reads every pending event; each one withdraws the guard's word for
// the slot it names, or for all of them. g.mu held.
func (g *guard) drain() {
	var buf [4096]byte
	for {
		k, err := unix.Read(g.fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || k <= 0 {
			if err != nil && err != unix.EAGAIN {
				g.none = true // unreadable: events may be lost
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= k; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 || int(ev.Wd) == g.dir {
				g.none = true
				continue
			}
			for j := range g.slots {
				if g.slots[j].wd == int(ev.Wd) {
					g.slots[j].ok = false
				}
			}
		}
	}
}

// close stops the guard. Closing an inotify fd can take milliseconds: not
// on the caller's path (a promotion).
func (g *guard) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fd < 0 {
		return
	}
	fd := g.fd
	g.fd, g.none = -1, true
	go func() { _ = unix.Close(fd) }()
}
