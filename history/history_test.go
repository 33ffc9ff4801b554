package history

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// newRecorder is a recorder of queue q with k kept of n run slots (files in
// a temp dir), on a fresh Redis.
func newRecorder(t *testing.T, k, n int) (*Recorder, *redis.Client, *lock.FileSet) {
	t.Helper()
	rdb := redistest.Start(t).Client()
	run, err := lock.NewFileSet(t.TempDir(), "q", lock.RoleRun, n)
	if err != nil {
		t.Fatal(err)
	}
	return &Recorder{Client: rdb, Queue: "q", Keep: k, Run: run, PID: 100, Host: "h"}, rdb, run
}

func stats(t *testing.T, rdb *redis.Client, q string) map[string]int64 {
	t.Helper()
	c, err := work.ReadCounts(context.Background(), rdb, q)
	if err != nil {
		t.Fatal(err)
	}
	return c.Stats
}

func coverage(t *testing.T, rdb *redis.Client, q string, k int) *Coverage {
	t.Helper()
	c, err := ReadCoverage(context.Background(), rdb, q, k, stats(t, rdb, q))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func events(t *testing.T, rdb *redis.Client, q string) []Event {
	t.Helper()
	ev, err := ReadEvents(context.Background(), rdb, q, 50)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestGapsAndBelowK: with k = 2, one holder alone leaves the queue below k
// until a second takes its slot; a retirement and a promotion record the
// slot's gap; each step adds its event.
func TestGapsAndBelowK(t *testing.T) {
	ctx := context.Background()
	a, rdb, _ := newRecorder(t, 2, 2)
	b := *a
	b.PID = 200

	if _, known, err := a.Took(ctx, 0, ByCandidate, nil, -1); err != nil || known {
		t.Fatalf("first take: gap known %v, %v; want unknown", known, err)
	}
	time.Sleep(300 * time.Millisecond)
	// One of two held: the time since counts below k, read as it grows.
	if c := coverage(t, rdb, "q", 2); c.Held != 1 || c.BelowK < 250*time.Millisecond || c.BelowK > 5*time.Second {
		t.Fatalf("one holder of k=2 for 300ms: %+v", c)
	}
	if _, _, err := b.Took(ctx, 1, ByCandidate, nil, -1); err != nil {
		t.Fatal(err)
	}
	charged := stats(t, rdb, "q")[StatBelowKMS]
	if charged < 250 || charged > 5000 {
		t.Fatalf("below_k_ms = %d after 300ms with one holder", charged)
	}
	time.Sleep(100 * time.Millisecond)
	if c := coverage(t, rdb, "q", 2); c.Held != 2 || c.BelowK != time.Duration(charged)*time.Millisecond {
		t.Fatalf("two holders of k=2: below k grew: %+v, charged %dms", c, charged)
	}

	// run-1 retires, a standby takes it 200ms later: a gap of about 200ms.
	if err := b.Left(ctx, 1, WhyLifetime, 42); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	c := *a
	c.PID = 300
	gap, known, err := c.Took(ctx, 1, ByStandby, nil, -1)
	if err != nil || !known || gap < 150*time.Millisecond || gap > 5*time.Second {
		t.Fatalf("promotion 200ms after a retirement: gap %v known %v, %v", gap, known, err)
	}
	cov := coverage(t, rdb, "q", 2)
	g := cov.Gaps[ByStandby]
	if g.Count != 1 || g.Sum != gap || g.Buckets[2] != 1 { // (0.1s, 0.5s]
		t.Errorf("gaps %+v after one of %v", cov.Gaps, gap)
	}
	if cov.BelowK < time.Duration(charged)*time.Millisecond+150*time.Millisecond {
		t.Errorf("below k %v: the 200ms with one holder not counted (had %dms)", cov.BelowK, charged)
	}
	var kinds []string
	for _, e := range events(t, rdb, "q") {
		kinds = append(kinds, e.Kind+" "+e.Slot)
	}
	if got, want := strings.Join(kinds, ", "), "took run-0, took run-1, retired run-1, promoted run-1"; got != want {
		t.Errorf("events: %s; want %s", got, want)
	}
	ev := events(t, rdb, "q")
	if last := ev[len(ev)-1]; last.PID != 300 || last.Gap == nil || *last.Gap != gap || !strings.Contains(last.String(), "promoted") {
		t.Errorf("promotion event %+v (%s)", last, last)
	}
	if ret := ev[2]; ret.Jobs != 42 || ret.Why != WhyLifetime {
		t.Errorf("retirement event %+v", ret)
	}
}

// TestLookNoticesDeath: a holder gone without leaving is noticed by the
// next look of another: a died event, the slot's gap runs from then, and
// the time below k from then.
func TestLookNoticesDeath(t *testing.T) {
	ctx := context.Background()
	me, rdb, run := newRecorder(t, 2, 2)
	me.PID = os.Getpid()
	s0, ok, err := run.TryAcquire()
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	s1, ok, err := run.TryAcquire()
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	for _, s := range []lock.Slot{s0, s1} {
		if _, _, err := me.Took(ctx, s.Index(), ByCandidate, nil, -1); err != nil {
			t.Fatal(err)
		}
	}
	if seen, err := me.Look(ctx); err != nil || seen != "11" {
		t.Fatalf("look with both held: %q, %v", seen, err)
	}
	// s1's holder "dies": its slot frees without a leave. A look within the
	// trust window defers to the take; after it, the death is noticed.
	_ = s1.Release()
	if _, err := me.Look(ctx); err != nil {
		t.Fatal(err)
	}
	if c := coverage(t, rdb, "q", 2); c.Held != 2 {
		t.Fatalf("a look right after the take overruled it: %+v", c)
	}
	time.Sleep(trustWindow + 100*time.Millisecond)
	if _, err := me.Look(ctx); err != nil {
		t.Fatal(err)
	}
	ev := events(t, rdb, "q")
	if last := ev[len(ev)-1]; last.Kind != KindDied || last.Slot != s1.Name() || last.PID != os.Getpid() || last.SeenBy == "" {
		t.Fatalf("after the death: last event %+v", last)
	}
	time.Sleep(300 * time.Millisecond)
	gap, known, err := me.Took(ctx, s1.Index(), ByStandby, &lock.Record{PID: 4242}, -1)
	if err != nil || !known || gap < 250*time.Millisecond || gap > 5*time.Second {
		t.Fatalf("take 300ms after the death was noticed: gap %v %v %v", gap, known, err)
	}
	if c := coverage(t, rdb, "q", 2); c.BelowK < 250*time.Millisecond || c.BelowK > 5*time.Second {
		t.Errorf("below k %v; want about 300ms", c.BelowK)
	}
	ev = events(t, rdb, "q")
	if last := ev[len(ev)-1]; last.DiedPID != 4242 || !strings.Contains(last.String(), "after pid 4242 died") {
		t.Errorf("take after a death: %+v", last)
	}
	_ = s0.Release()
}

// TestUnnoticedDeath: when nobody looked after a holder died, its slot's
// next taker charges the time since the last look as below k and as gap.
func TestUnnoticedDeath(t *testing.T) {
	ctx := context.Background()
	r, rdb, _ := newRecorder(t, 1, 1)
	if _, _, err := r.Took(ctx, 0, ByCandidate, nil, -1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	gap, known, err := r.Took(ctx, 0, ByCandidate, &lock.Record{PID: 1}, -1)
	if err != nil || !known || gap < 250*time.Millisecond || gap > 5*time.Second {
		t.Fatalf("gap %v %v %v", gap, known, err)
	}
	c := coverage(t, rdb, "q", 1)
	if c.BelowK < 250*time.Millisecond || c.Held != 1 || c.Gaps[ByCandidate].Count != 1 {
		t.Errorf("coverage %+v", c)
	}

	// A standby that saw the slot free for 50ms of the 300ms since the
	// last look knows better: the gap and the time below k are its 50ms.
	time.Sleep(300 * time.Millisecond)
	gap, known, err = r.Took(ctx, 0, ByStandby, &lock.Record{PID: 2}, 50*time.Millisecond)
	if err != nil || !known || gap != 50*time.Millisecond {
		t.Fatalf("gap %v %v %v; want the standby's 50ms", gap, known, err)
	}
	if d := coverage(t, rdb, "q", 1).BelowK - c.BelowK; d != 50*time.Millisecond {
		t.Errorf("below k grew %v; want the standby's 50ms", d)
	}
}

// TestEventsCapped: the stream stays near EventsKept however many events.
func TestEventsCapped(t *testing.T) {
	ctx := context.Background()
	r, rdb, _ := newRecorder(t, 1, 1)
	for range 3 * EventsKept {
		if err := r.DeadLetters(ctx, "run-0", 1); err != nil {
			t.Fatal(err)
		}
	}
	if n := rdb.XLen(ctx, EventsKey("q")).Val(); n < EventsKept || n > 2*EventsKept {
		t.Errorf("%d events kept after %d; want about %d", n, 3*EventsKept, EventsKept)
	}
}

// TestLateLeaveIsIgnored: a holder frozen past its lease (fleet mode)
// leaves late, after another process took its slot: its leave records
// nothing, and the slot stays the new holder's.
func TestLateLeaveIsIgnored(t *testing.T) {
	ctx := context.Background()
	a, rdb, _ := newRecorder(t, 1, 1)
	if _, _, err := a.Took(ctx, 0, ByCandidate, nil, -1); err != nil {
		t.Fatal(err)
	}
	b := *a
	b.PID = 200
	if _, _, err := b.Took(ctx, 0, ByStandby, &lock.Record{PID: a.PID}, -1); err != nil {
		t.Fatal(err)
	}
	if err := a.Left(ctx, 0, WhyError, 3); err != nil {
		t.Fatal(err)
	}
	for _, e := range events(t, rdb, "q") {
		if e.Kind == KindLeft || e.Kind == KindRetired {
			t.Fatalf("the late leave was recorded: %+v", e)
		}
	}
	if c := coverage(t, rdb, "q", 1); c.Held != 1 {
		t.Fatalf("coverage %+v: the slot is the new holder's", c)
	}
	if err := b.Left(ctx, 0, WhyLifetime, 5); err != nil {
		t.Fatal(err)
	}
	if c := coverage(t, rdb, "q", 1); c.Held != 0 {
		t.Fatalf("coverage %+v: its holder's own leave frees it", c)
	}
}
