package work

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var berlinTick = time.Date(2026, 10, 25, 2, 30, 0, 0, time.FixedZone("CET", 3600))

// A periodic job's job frame carries its tick and entry; another's neither.
func TestJobFrameCarriesTick(t *testing.T) {
	j := &Job{ID: "1-0", Attempt: 1, Queue: "q", Payload: []byte("p"), Tick: berlinTick, Periodic: "nightly"}
	f := jobFrame(j)
	head := string(f.encode()[0])
	if !strings.Contains(head, `"tick":"2026-10-25T02:30:00+01:00"`) || !strings.Contains(head, `"periodic":"nightly"`) {
		t.Fatalf("periodic job's frame header %s", head)
	}
	f = jobFrame(&Job{ID: "2-0", Attempt: 1, Queue: "q"})
	if head := string(f.encode()[0]); strings.Contains(head, "tick") || strings.Contains(head, "periodic") {
		t.Fatalf("plain job's frame header %s", head)
	}
}

// An exec job gets BATON_TICK and BATON_PERIODIC when periodic, not else.
func TestExecEnvCarriesTick(t *testing.T) {
	out := filepath.Join(t.TempDir(), "env")
	x := &Exec{Argv: []string{"/bin/sh", "-c", `echo "tick=$BATON_TICK periodic=$BATON_PERIODIC" >> ` + out}, Logger: testLogger()}
	if err := x.Handle(context.Background(), &Job{ID: "1-0", Attempt: 1, Queue: "q", Slot: "h/run-0", Tick: berlinTick, Periodic: "nightly"}); err != nil {
		t.Fatal(err)
	}
	if err := x.Handle(context.Background(), &Job{ID: "2-0", Attempt: 1, Queue: "q", Slot: "h/run-0"}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	want := "tick=2026-10-25T02:30:00+01:00 periodic=nightly\ntick= periodic=\n"
	if string(b) != want {
		t.Fatalf("env seen: %q, want %q", b, want)
	}
}

// EntryFields writes the fields Enqueue writes, in its order, and refuses
// what a stream entry cannot say.
func TestEntryFields(t *testing.T) {
	f, level, err := EntryFields([]byte("p"), MaxAttempts(3), Timeout(5*time.Second), WithPriority(PriorityLow), UniqueKey("k"))
	want := []string{"payload", "p", "unique", "k", "max_attempts", "3", "timeout", "5000", "priority", "low"}
	if err != nil || level != PriorityLow || !slices.Equal(f, want) {
		t.Fatalf("EntryFields = %v %v %v, want %v", f, level, err, want)
	}
	var o jobOptions
	for _, opt := range []Option{MaxAttempts(3), Timeout(5 * time.Second), WithPriority(PriorityLow), UniqueKey("k")} {
		_ = opt(&o)
	}
	if got := o.fields(); got != len(want) {
		t.Fatalf("enqueue packs %d strings, EntryFields %d", got, len(want))
	}
	for _, bad := range []Option{In(time.Minute), UniqueFor(time.Minute)} {
		if _, _, err := EntryFields(nil, bad); err == nil {
			t.Errorf("EntryFields accepted %T", bad)
		}
	}
}

// A keyed job's job frame carries its key; a job without one has no key field.
func TestKeyJobFrame(t *testing.T) {
	f := jobFrame(&Job{ID: "1-0", Attempt: 1, Queue: "q", Key: "tenant-42"})
	head := string(f.encode()[0])
	if !strings.Contains(head, `"key":"tenant-42"`) {
		t.Fatalf("keyed job's frame header %s", head)
	}
	f = jobFrame(&Job{ID: "2-0", Attempt: 1, Queue: "q"})
	if head := string(f.encode()[0]); strings.Contains(head, `"key"`) {
		t.Fatalf("plain job's frame header %s", head)
	}
}
