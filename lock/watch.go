//go:build linux

package lock

import (
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Watcher is a Set that can tell when its slots may have changed hands, so a
// standby need not wait for its next poll.
type Watcher interface {
	// Watch returns a channel that gets a value (coalesced) whenever a slot
	// may have been freed, and a func that stops watching. A hint only:
	// callers still poll.
	Watch() (<-chan struct{}, func(), error)
}

var _ Watcher = (*FileSet)(nil)

// Watch implements Watcher with inotify on the lock dir: a holder's one
// writable descriptor of its lock file is closed when it releases the slot or
// dies (kill -9 included), and its record is removed on release. Candidates
// probe read-only, so a failed probe raises nothing.
func (s *FileSet) Watch() (<-chan struct{}, func(), error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, nil, err
	}
	if _, err := unix.InotifyAddWatch(fd, s.dir, unix.IN_CLOSE_WRITE|unix.IN_DELETE); err != nil {
		_ = unix.Close(fd)
		return nil, nil, err
	}
	f := os.NewFile(uintptr(fd), "inotify") // non-blocking: reads park in Go's poller
	ch := make(chan struct{}, 1)
	prefix := s.queue + "." + s.role + "."
	go func() { // owned by the returned stop func, which closes f
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
				off += unix.SizeofInotifyEvent + int(ev.Len)
				if strings.HasPrefix(name, prefix) {
					select {
					case ch <- struct{}{}:
					default:
					}
				}
			}
		}
	}()
	// Closing an inotify fd can take milliseconds: not on the caller's path.
	stop := func() { go f.Close() }
	return ch, stop, nil
}
