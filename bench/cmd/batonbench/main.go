// Command batonbench is baton's command line with a built-in handler, for the
// process-level benchmarks of ../..: it is what a Go program embedding
// cli.Main looks like, and it records when jobs start and end.
//
// A job's payload is a list of words:
//
//	mark      append "S|E pid unix-ns job-id attempt" lines to $BATON_BENCH_MARKS
//	sleep=D   sleep for the Go duration D
//	hang      on the first attempt, wait until the job is cancelled
//
// Any other payload is a no-op job.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/baton-run/baton/cli"
	"github.com/baton-run/baton/work"
)

func main() {
	h := &handler{path: os.Getenv("BATON_BENCH_MARKS"), pid: os.Getpid()}
	os.Exit(cli.Main(context.Background(), os.Args[1:], cli.Options{Handler: h}))
}

type handler struct {
	path string
	pid  int
	once sync.Once
	f    *os.File // opened O_APPEND on first mark: one write per line is atomic
}

func (h *handler) Handle(ctx context.Context, j *work.Job) error {
	p := string(j.Payload)
	if !strings.HasPrefix(p, "mark") {
		return nil
	}
	h.mark("S", j)
	for _, w := range strings.Fields(p)[1:] {
		switch {
		case strings.HasPrefix(w, "sleep="):
			d, err := time.ParseDuration(strings.TrimPrefix(w, "sleep="))
			if err != nil {
				return err
			}
			time.Sleep(d)
		case w == "hang" && j.Attempt == 1:
			<-ctx.Done()
			return ctx.Err()
		}
	}
	h.mark("E", j)
	return nil
}

func (h *handler) mark(kind string, j *work.Job) {
	now := time.Now().UnixNano()
	h.once.Do(func() {
		if h.path != "" {
			h.f, _ = os.OpenFile(h.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		}
	})
	if h.f != nil {
		fmt.Fprintf(h.f, "%s %d %d %s %d\n", kind, h.pid, now, j.ID, j.Attempt)
	}
}
