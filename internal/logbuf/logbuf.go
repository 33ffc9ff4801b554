// Package logbuf keeps a stalled log reader from stalling the process that
// logs: a Writer takes each log line into a bounded buffer and returns at
// once; one goroutine of its own writes the lines out, in order.
//
//	w := logbuf.New(os.Stderr, logbuf.Options{})
//	log := zerolog.New(w)
//	defer w.Close(time.Second)
//
// A reader that stops reading but keeps its end open (`2>&1 | logger` with
// the logger stopped or hung) fills the pipe, and then every write to it
// blocks: without a Writer in between, every goroutine that logs would
// block with it. With one, only its own goroutine waits; once the buffer is
// full further lines are dropped and counted, and the next line that fits
// is preceded by a notice of how many were dropped (Options.Notice), so the
// gap shows in the log once its reader is back. Close flushes what is
// buffered, waiting at most the time it is given: an exit never hangs on
// the log.
//
// Each Write is taken as one line (zerolog writes one event per call) and
// written out by one write of its own, as it came: lines of several
// processes sharing a pipe do not interleave mid-line any more than before.
package logbuf

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// DefaultMax is Options.Max's default: 256 KiB of lines waiting, some
// thousands of lines, beyond the pipe's own 64 KiB.
const DefaultMax = 256 << 10

// noticeRoom is about a notice's length: below it, a line is dropped
// without formatting one.
const noticeRoom = 128

// ErrStalled is Close's error when the lines could not all be written
// within its wait.
var ErrStalled = errors.New("log reader stalled")

// Options tune a Writer.
type Options struct {
	// Max is how many bytes of lines may wait to be written; a line that
	// does not fit is dropped. Default DefaultMax.
	Max int
	// Notice formats the line that says n lines were dropped, in the log's
	// own format; it must not write to the Writer. Default: plain text,
	// "log: dropped n lines: log reader stalled".
	Notice func(n uint64) []byte
}

// Writer is an io.Writer whose Write never blocks on its output. It is
// safe for concurrent use.
type Writer struct {
	out    io.Writer
	max    int
	notice func(n uint64) []byte
	wake   chan struct{} // a token: lines are waiting, or closed
	done   chan struct{} // closed when drain returns

	mu      sync.Mutex
	buf     []byte // the lines waiting, in order
	ends    []int  // where each line in buf ends
	dropped uint64 // lines dropped since the last notice
	total   uint64 // lines dropped in all
	closed  bool
}

// New starts a Writer onto out, and the goroutine that writes to out; Close
// stops it.
func New(out io.Writer, o Options) *Writer {
	w := &Writer{out: out, max: o.Max, notice: o.Notice, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if w.max <= 0 {
		w.max = DefaultMax
	}
	if w.notice == nil {
		w.notice = func(n uint64) []byte {
			return fmt.Appendf(nil, "log: dropped %d lines: log reader stalled\n", n)
		}
	}
	go w.drain()
	return w
}

// Write takes p, one line, to be written out, or drops it when the buffer
// is full or the Writer is closed; either way it returns len(p), nil at
// once (a log line's fate is never the caller's).
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	ok := !w.closed
	if ok && w.dropped > 0 {
		// The notice goes before the next line kept, and only with it:
		// the gap shows where it was. Formatted only once it may fit.
		if ok = len(w.buf)+len(p)+noticeRoom <= w.max; ok {
			note := w.notice(w.dropped)
			if ok = len(w.buf)+len(note)+len(p) <= w.max; ok {
				w.add(note)
				w.dropped = 0
			}
		}
	}
	if ok = ok && len(w.buf)+len(p) <= w.max; ok {
		w.add(p)
	} else {
		w.dropped++
		w.total++
	}
	w.mu.Unlock()
	if ok {
		select {
		case w.wake <- struct{}{}:
		default: // a token is waiting already
		}
	}
	return len(p), nil
}

// add appends line to the buffer; w.mu is held.
func (w *Writer) add(line []byte) {
	w.buf = append(w.buf, line...)
	w.ends = append(w.ends, len(w.buf))
}

// Dropped is how many lines were dropped in all.
func (w *Writer) Dropped() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total
}

// Close stops taking lines and waits at most wait for those buffered to be
// written out (and the notice of lines dropped, if any); ErrStalled when
// they were not. Lines written after Close are dropped. Only the first
// call waits for the flush; later calls return its outcome only if done.
func (w *Writer) Close(wait time.Duration) error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.done:
		return nil
	case <-t.C:
		return fmt.Errorf("flush log: %w", ErrStalled)
	}
}

// drain is the Writer's goroutine: it takes the buffered lines in one swap
// and writes them out one by one, until closed with nothing left. Only it
// writes to out. A write that fails (a reader gone: EPIPE) loses its line.
func (w *Writer) drain() {
	defer close(w.done)
	var buf []byte // the batch being written, and then the spare
	var ends []int
	for {
		w.mu.Lock()
		for len(w.ends) == 0 {
			if w.dropped > 0 {
				w.add(w.notice(w.dropped)) // nothing came after the gap: say so now
				w.dropped = 0
				break
			}
			if w.closed {
				w.mu.Unlock()
				return
			}
			w.mu.Unlock()
			<-w.wake
			w.mu.Lock()
		}
		buf, w.buf = w.buf, buf[:0]
		ends, w.ends = w.ends, ends[:0]
		w.mu.Unlock()
		start := 0
		for _, end := range ends {
			_, _ = w.out.Write(buf[start:end])
			start = end
		}
	}
}
