//go:build linux

package lock

import (
	"os"
	"path/filepath"
	"sync"

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
// files and every dir on their path (inotify: link counts, moves,
// deletions). A win skips the check while nothing was seen to change the
// file it locked.
//
// Why that is enough: a holder of an unlinked file either held it when the
// view began (the check sees it) or locked a file unlinked since (an
// event), or locked it after the check although it was unlinked before:
// a candidate between its open and its lock across the whole check. A win
// refuses a file its path no longer names (names), so only a baton from
// before that rule, during a deploy, could be that candidate; it would
// lose the slot at its watch's next look, within about three seconds.
//
// The view also reads records without asking the kernel about slots that
// have none (Records would read /proc/locks for them): a slot released a
// moment ago reads as free, and a holder that has not yet published its
// record too, which costs a failed try (standby.Promote asks the set
// itself on its polls and after a miss).
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
	fd    int          // inotify, non-blocking; read only under mu, never by a goroutine of its own
	dirs  map[int]bool // the watches on the lock dir and each dir above it
	slots []guarded
	none  bool // a dir moved or went, or events were lost: vouch for nothing
}

// guarded is one slot's lock file as the guard saw it.
type guarded struct {
	wd       int    // its inotify watch
	dev, ino uint64 // the file the path named when the watch began
	ok       bool   // watched, and no holder of an unlinked file of the path when checked
}

func newGuard(s *FileSet) (*guard, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	g := &guard{fd: fd, dirs: map[int]bool{}, slots: make([]guarded, s.n)}
	// The dir and every dir above it: a parent moved aside and back (or
	// replaced) moves the lock files with it, and raises an event only on
	// itself.
	for dir := s.dir; ; dir = filepath.Dir(dir) {
		wd, err := unix.InotifyAddWatch(fd, dir, unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_ONLYDIR)
		if err != nil {
			_ = unix.Close(fd)
			return nil, err
		}
		g.dirs[wd] = true
		if dir == filepath.Dir(dir) {
			break
		}
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
		var st unix.Stat_t
		if unix.Lstat(paths[i], &st) == nil {
			g.slots[i] = guarded{wd: wd, dev: st.Dev, ino: st.Ino, ok: true}
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

// vouch reports whether a win of slot i, whose lock file is dev:ino (the
// file its path names now), needs no check of the kernel's locks: the
// guard checked the path when it began, has watched that file since, and
// no event has touched it or a dir on its path.
func (g *guard) vouch(i int, dev, ino uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.drain()
	if g.none || i >= len(g.slots) {
		return false
	}
	sl := g.slots[i]
	return sl.ok && sl.dev == dev && sl.ino == ino
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
		eachEvent(buf[:k], func(ev *unix.InotifyEvent, _ string) {
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 || g.dirs[int(ev.Wd)] {
				g.none = true
				return
			}
			for j := range g.slots {
				if g.slots[j].wd == int(ev.Wd) {
					g.slots[j].ok = false
				}
			}
		})
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
