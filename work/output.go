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

// smallPayload fits in an empty pipe even when the kernel gives pipes a
// single page: it is written at once, without a goroutine.
const smallPayload = 4096

// pipes connects a child's stdin, stdout and stderr to pipes baton owns, so
// that cmd.Wait returns when the child exits (os/exec starts no copying
// goroutines of its own) whatever the processes it left behind hold open.
type pipes struct {
	stdin   *os.File   // our write end; nil once the payload is written
	child   []*os.File // the child's ends: stdin read, stdout and stderr write
	readers []*os.File // our read ends of stdout and stderr
	wg      sync.WaitGroup
}

// startPipes gives cmd its three pipes, writes payload to stdin and starts
// copying stdout and stderr.
func startPipes(cmd *exec.Cmd, payload []byte, stdout, stderr io.Writer) (*pipes, error) {
	p := &pipes{}
	fail := func(err error) (*pipes, error) {
		p.started()
		p.wait()
		return nil, err
	}
	in, w, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	p.child = append(p.child, in)
	p.stdin = w
	if len(payload) <= smallPayload {
		_, _ = w.Write(payload)
		_ = w.Close()
		p.stdin = nil
	} else {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			// Fails when the child exits without reading it all: wait closes w.
			_, _ = w.Write(payload)
			_ = w.Close()
		}()
	}
	for _, dst := range []io.Writer{stdout, stderr} {
		r, pw, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		p.readers, p.child = append(p.readers, r), append(p.child, pw)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			buf := copyBufs.Get().(*[]byte)
			defer copyBufs.Put(buf)
			// Hide *os.File's WriteTo, or CopyBuffer ignores buf.
			_, _ = io.CopyBuffer(dst, struct{ io.Reader }{r}, *buf)
		}()
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.child[0], p.child[1], p.child[2]
	return p, nil
}

// started closes our copies of the child's ends, so the readers see EOF once
// the child side is gone.
func (p *pipes) started() {
	for _, f := range p.child {
		_ = f.Close()
	}
}

// wait is called once the child has exited: the rest of a payload it did
// not read is dropped, and the copies of its output finish. A process the
// job left behind could hold the output pipes open forever, so after a short
// wait the read ends are closed: cut reports that the output was cut off.
func (p *pipes) wait() (cut bool) {
	if p.stdin != nil {
		_ = p.stdin.Close()
	}
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(200 * time.Millisecond):
		cut = true
		for _, r := range p.readers {
			_ = r.Close()
		}
		<-done
	}
	for _, r := range p.readers {
		_ = r.Close()
	}
	return cut
}
