package work

import (
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// copyBufs saves io.Copy's 32 KiB per stream per job: job output is small.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 4096); return &b }}

// output copies a child's stdout and stderr from pipes we own.
type output struct {
	readers []*os.File
	writers []*os.File
	wg      sync.WaitGroup
}

// startOutput gives cmd pipe write ends and starts copying the read ends.
func startOutput(cmd *exec.Cmd, stdout, stderr io.Writer) (*output, error) {
	o := &output{}
	for _, w := range []io.Writer{stdout, stderr} {
		r, pw, err := os.Pipe()
		if err != nil {
			o.started()
			o.wait()
			return nil, err
		}
		o.readers, o.writers = append(o.readers, r), append(o.writers, pw)
		o.wg.Add(1)
		go func() {
			defer o.wg.Done()
			buf := copyBufs.Get().(*[]byte)
			defer copyBufs.Put(buf)
			// Hide *os.File's WriteTo, or CopyBuffer ignores buf.
			_, _ = io.CopyBuffer(w, struct{ io.Reader }{r}, *buf)
		}()
	}
	cmd.Stdout, cmd.Stderr = o.writers[0], o.writers[1]
	return o, nil
}

// started closes our copies of the write ends, so the readers see EOF once
// the child side is gone.
func (o *output) started() {
	for _, w := range o.writers {
		_ = w.Close()
	}
}

// wait lets the copies finish; a writer that escaped the process group could
// hold a pipe open forever, so after a short wait the read ends are closed.
func (o *output) wait() {
	done := make(chan struct{})
	go func() { o.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(200 * time.Millisecond):
		for _, r := range o.readers {
			_ = r.Close()
		}
		<-done
	}
	for _, r := range o.readers {
		_ = r.Close()
	}
}
