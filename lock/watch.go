//go:build linux

package lock

import (
	"errors"
	"os"
	"strings"
	"time"
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
// dies (kill -9 included), after the lock is dropped. Candidates probe
// read-only, so a failed probe raises nothing. The removal of a record is
// not watched: a release removes it before it drops the lock, and a
// standby woken then would try a slot still held, miss, and back off.
func (s *FileSet) Watch() (<-chan struct{}, func(), error) {
	const mask = unix.IN_CLOSE_WRITE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF
	prefix := s.queue + "." + s.role + "."
	n, err := newNotifier(func(name string) bool { return name == "" || strings.HasPrefix(name, prefix) },
		// The dir itself was removed or moved: its holders recreate it.
		func(n *notifier) { go n.rewatch(s.dir, mask) })
	if err != nil {
		return nil, nil, err
	}
	if err := n.add(s.dir, mask); err != nil {
		n.close()
		return nil, nil, err
	}
	// Closing an inotify fd can take milliseconds: not on the caller's path.
	stop := func() { go n.close() }
	return n.c, stop, nil
}

// notifier is one inotify instance. Its goroutine, stopped by close, sends a
// value on c (coalesced) for each event whose name match accepts (events on a
// watched file itself have the name ""), and calls onSelf (when not nil) for
// each event on a watched path itself.
type notifier struct {
	f *os.File
	c chan struct{}
}

func newNotifier(match func(name string) bool, onSelf func(*notifier)) (*notifier, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	n := &notifier{f: os.NewFile(uintptr(fd), "inotify"), c: make(chan struct{}, 1)} // non-blocking: reads park in Go's poller
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := n.f.Read(buf)
			if err != nil {
				return
			}
			eachEvent(buf[:k], func(ev *unix.InotifyEvent, name string) {
				if name == "" && onSelf != nil {
					onSelf(n)
				}
				if match(name) {
					select {
					case n.c <- struct{}{}:
					default:
					}
				}
			})
		}
	}()
	return n, nil
}

// eachEvent calls fn with each inotify event in buf, as read from an
// inotify descriptor, and its name ("" for an event on the watched path
// itself).
func eachEvent(buf []byte, fn func(ev *unix.InotifyEvent, name string)) {
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
		off += unix.SizeofInotifyEvent + int(ev.Len)
		fn(ev, name)
	}
}

// add watches path for the events in mask.
func (n *notifier) add(path string, mask uint32) error {
	rc, err := n.f.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	if err := rc.Control(func(fd uintptr) { _, werr = unix.InotifyAddWatch(int(fd), path, mask) }); err != nil {
		return err
	}
	return werr
}

// rewatch waits (up to a minute) for dir to exist again and watches it.
// It stops when n is closed.
func (n *notifier) rewatch(dir string, mask uint32) {
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		err := n.add(dir, mask)
		if err == nil || errors.Is(err, os.ErrClosed) {
			return
		}
	}
}

// close stops the goroutine and closes the instance.
func (n *notifier) close() { _ = n.f.Close() }
