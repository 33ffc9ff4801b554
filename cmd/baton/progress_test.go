package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/baton-run/baton/internal/ptytest"
	"github.com/baton-run/baton/work"
)

// onTerminal runs `baton args...` with stderr on a pty (stdout, stdin
// as given) and returns what the terminal got.
func (r *rig) onTerminal(stdin string, args ...string) (stdout, term string) {
	r.t.Helper()
	pty := ptytest.Open(r.t)
	cmd := r.cmd(args...)
	var out bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, pty.TTY
	if err := cmd.Run(); err != nil {
		r.t.Fatalf("baton %s: %v\n%s", strings.Join(args, " "), err, pty.Output())
	}
	pty.Close()
	return out.String(), pty.Output()
}

// TestProgressLines: on a terminal, enqueue of a large stdin, cancel of
// many ids, dead requeue and dead purge of many letters write a progress
// line (count of total, rate) and a one-line summary to stderr; never with
// --quiet, never when stderr is not a terminal; stdout is the same.
func TestProgressLines(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const n = 300
	var stdin strings.Builder
	for i := range n {
		fmt.Fprintf(&stdin, "job %d\n", i)
	}
	out, term := r.onTerminal(stdin.String(), "enqueue")
	ids := strings.Fields(out)
	if len(ids) != n {
		t.Fatalf("enqueue on a terminal printed %d ids, want %d", len(ids), n)
	}
	for _, want := range []string{"\x1b[K", "enqueue: ", " of 300 jobs (", "/s", "enqueue: 300 jobs in "} {
		if !strings.Contains(term, want) {
			t.Errorf("enqueue's terminal lacks %q: %q", want, term)
		}
	}
	if _, term := r.onTerminal(stdin.String(), "enqueue", "--quiet"); term != "" {
		t.Errorf("enqueue --quiet wrote to the terminal: %q", term)
	}
	out2, errOut, code := func() (string, string, int) {
		cmd := r.cmd("enqueue")
		cmd.Stdin = strings.NewReader(stdin.String())
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		if err != nil {
			return o.String(), e.String(), 1
		}
		return o.String(), e.String(), 0
	}()
	if code != 0 || errOut != "" || len(strings.Fields(out2)) != n {
		t.Errorf("enqueue, stderr a pipe: exit %d, stderr %q, %d ids", code, errOut, len(strings.Fields(out2)))
	}

	// cancel of the first 300: progress and summary; stdout one line per id.
	out, term = r.onTerminal(strings.Join(ids, "\n"), "cancel", "-")
	if strings.Count(out, "cancelled: was waiting") != n {
		t.Errorf("cancel printed %d cancelled lines", strings.Count(out, "cancelled: was waiting"))
	}
	for _, want := range []string{" of 300 ids (", "cancel: 300 ids in "} {
		if !strings.Contains(term, want) {
			t.Errorf("cancel's terminal lacks %q: %q", want, term)
		}
	}
	// dead requeue --all (300 letters), then cancel again, then purge by id.
	out, term = r.onTerminal("", "dead", "requeue", "--all")
	if !strings.Contains(out, "requeued 300 jobs") || !strings.Contains(term, " of 300 dead letters (") || !strings.Contains(term, "dead requeue: 300 dead letters in ") {
		t.Errorf("dead requeue --all: stdout %q…, terminal %q", out[:min(len(out), 200)], term)
	}
	if _, term := r.onTerminal(strings.Join(ids, "\n"), "cancel", "--quiet", "-"); term != "" {
		t.Errorf("cancel --quiet wrote to the terminal: %q", term)
	}
	out, term = r.onTerminal("", append([]string{"dead", "purge"}, ids...)...)
	if !strings.Contains(out, "purged 300 dead letters") || !strings.Contains(term, "dead purge: 300 dead letters in ") {
		t.Errorf("dead purge of 300 ids: stdout %q, terminal %q", out, term)
	}
	if c, err := work.ReadCounts(context.Background(), r.client(), "default"); err != nil || c.Dead != 0 || c.Waiting != 2*n {
		t.Errorf("after purge: %+v %v, want 0 dead and %d waiting", c, err, 2*n)
	}
	// A small run on a terminal: no line, no summary.
	two := strings.Fields(out2)[:2]
	if out, term := r.onTerminal("", "cancel", two[0], two[1]); term != "" || strings.Count(out, "cancelled: was waiting") != 2 {
		t.Errorf("cancel of 2 ids wrote to the terminal: %q (stdout %q)", term, out)
	}
}
