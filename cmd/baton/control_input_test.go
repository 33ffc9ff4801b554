package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/baton-run/baton/work"
)

// TestControlBadInput: the bad input of pause, resume and cancel that
// TestPauseBadInput and TestCancelBadInput leave out, each with one
// defined outcome: --for under a millisecond and stray arguments are usage
// errors (exit 2, nothing paused); an unreadable --from is a usage error;
// an id named twice is cancelled once (exit 0, one line); a dead job is
// "it is dead" (exit 1); a queue that does not exist warns and is paused.
func TestControlBadInput(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"pause", "--for", "500us"}, "under 1ms"},
		{[]string{"pause", "--for", "soon"}, "invalid argument"},
		{[]string{"pause", "thumbs"}, "unexpected argument"},
		{[]string{"resume", "thumbs"}, "unexpected argument"},
		{[]string{"cancel", "--from", filepath.Join(r.dir, "nope")}, "no such file"},
		{[]string{"cancel", "1-0", "x-1"}, "not a job id"},
	} {
		_, errOut, code := r.baton(c.args...)
		if code != 2 || !strings.Contains(errOut, c.says) || strings.Count(strings.TrimSpace(errOut), "\n") > 1 {
			t.Errorf("baton %s: exit %d, %q; want 2 and one line (and a hint) saying %q", strings.Join(c.args, " "), code, errOut, c.says)
		}
	}
	if p, err := work.ReadPause(ctx, r.client(), "default"); err != nil || p != nil {
		t.Fatalf("bad pauses paused the queue: %+v %v", p, err)
	}

	ids := r.enqueue("default", 2)
	out, errOut, code := r.baton("cancel", ids[0], ids[0], ids[1])
	if code != 0 || strings.Count(out, "cancelled: was waiting") != 2 || strings.Count(out, "\n") != 2 {
		t.Errorf("cancel of an id named twice: exit %d\n%s%s", code, out, errOut)
	}
	if out, _, code := r.baton("cancel", ids[0]); code != 1 || !strings.Contains(out, "not cancelled: it is dead") {
		t.Errorf("cancel of a dead job: exit %d %q", code, out)
	}

	// A queue with no keys: a warning naming the queues there are, and
	// the pause is written (holders that start later find it).
	_, errOut, code = r.baton("pause", "--queue", "nope", "--reason", "typo?")
	if code != 0 || !strings.Contains(errOut, "warning: queue nope has no keys in this Redis database (a typo?); queues here: default") {
		t.Errorf("pause of a queue with no keys: exit %d %q", code, errOut)
	}
	if p, err := work.ReadPause(ctx, r.client(), "nope"); err != nil || p == nil || p.Reason != "typo?" {
		t.Errorf("pause of a queue with no keys: %+v %v", p, err)
	}
}

// TestCancelGoBadInput: the Go client's Cancel with no ids does nothing
// and says nothing is wrong; a malformed id is an error naming it, and
// nothing is cancelled.
func TestCancelGoBadInput(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	res, err := work.Cancel(ctx, r.client(), "default")
	if err != nil || len(res) != 0 {
		t.Errorf("Cancel without ids: %v %v", res, err)
	}
	ids := r.enqueue("default", 1)
	res, err = work.Cancel(ctx, r.client(), "default", "nope", ids[0])
	if err == nil || !strings.Contains(err.Error(), `"nope" is not a job id`) || len(res) != 0 {
		t.Errorf("Cancel of a malformed id: %v %v", res, err)
	}
	if loc, err := work.Locate(ctx, r.client(), "default", ids[0]); err != nil || loc.State != work.StateWaiting {
		t.Errorf("the good id after a malformed one: %+v %v", loc, err)
	}
}
