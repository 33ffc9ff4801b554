// Package ptytest opens a pseudo-terminal pair for tests of what baton
// writes to a terminal (a progress line), with x/sys/unix only:
//
//	term := ptytest.Open(t)
//	cmd.Stderr = term.TTY
//	... term.Output() holds what the terminal got.
package ptytest

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Term is a pty pair: TTY is the terminal side a program writes to; what
// it writes is read from the other side as it comes, into Output.
type Term struct {
	TTY    *os.File
	master *os.File
	mu     sync.Mutex
	out    bytes.Buffer
	done   chan struct{}
}

// Open opens a pty pair, closed in tb's cleanup.
func Open(tb testing.TB) *Term {
	tb.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		tb.Fatalf("open /dev/ptmx: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		tb.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		tb.Fatalf("pty number: %v", err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		tb.Fatalf("open pty %d: %v", n, err)
	}
	t := &Term{TTY: s, master: m, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		b := make([]byte, 4096)
		for {
			k, err := m.Read(b)
			t.mu.Lock()
			t.out.Write(b[:k])
			t.mu.Unlock()
			if err != nil { // EIO once the terminal side is closed
				if !errors.Is(err, io.EOF) && !errors.Is(err, unix.EIO) && !errors.Is(err, os.ErrClosed) {
					tb.Logf("read pty: %v", err)
				}
				return
			}
		}
	}()
	tb.Cleanup(func() { t.Close(); m.Close() })
	return t
}

// Close closes the terminal side and waits until everything written to
// it has been read; Output is then complete.
func (t *Term) Close() {
	t.TTY.Close()
	<-t.done
}

// Output is what the terminal got so far.
func (t *Term) Output() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.out.String()
}
