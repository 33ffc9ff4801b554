package periodic

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func mustSchedule(tb testing.TB, spec string) *Schedule {
	tb.Helper()
	s, err := ParseSchedule(spec)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func berlin(tb testing.TB) *time.Location {
	tb.Helper()
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		tb.Fatalf("load Europe/Berlin (install tzdata): %v", err)
	}
	return loc
}

// On the day Berlin skips 02:00-03:00 (29 March 2026), robfig/cron finds no
// 02:30 and the entry does not fire that day: the next tick is the next
// day's 02:30.
func TestDSTSpringForwardSkipsTheDay(t *testing.T) {
	b := berlin(t)
	s := mustSchedule(t, "CRON_TZ=Europe/Berlin 30 2 * * *")
	got := s.Next(time.Date(2026, 3, 28, 12, 0, 0, 0, b))
	want := time.Date(2026, 3, 30, 2, 30, 0, 0, b)
	if !got.Equal(want) {
		t.Fatalf("next 02:30 after 28 March noon = %v, want %v (no 02:30 on the 29th)", got, want)
	}
	// Prev agrees: from the 29th's evening, the last tick is the 28th's.
	if p := s.Prev(time.Date(2026, 3, 29, 23, 0, 0, 0, b)); !p.Equal(time.Date(2026, 3, 28, 2, 30, 0, 0, b)) {
		t.Fatalf("prev = %v, want 28 March 02:30", p)
	}
}

// On the day Berlin repeats 02:00-03:00 (25 October 2026), 02:30 happens
// twice, an hour apart (CEST, then CET): two ticks, two distinct instants,
// each claimed once, so the entry fires twice that night.
func TestDSTFallBackFiresTwice(t *testing.T) {
	b := berlin(t)
	s := mustSchedule(t, "CRON_TZ=Europe/Berlin 30 2 * * *")
	first := s.Next(time.Date(2026, 10, 24, 12, 0, 0, 0, b))
	second := s.Next(first)
	third := s.Next(second)
	if first.UTC() != time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC) || second.UTC() != time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC) {
		t.Fatalf("ticks on 25 October = %v, %v; want 00:30 and 01:30 UTC (02:30 CEST, 02:30 CET)", first.UTC(), second.UTC())
	}
	if third.UTC() != time.Date(2026, 10, 26, 1, 30, 0, 0, time.UTC) {
		t.Fatalf("third tick = %v, want 26 October 02:30 CET", third)
	}
	// Due ticks use instants: after the first, the second is still due.
	if d := due(s, CatchUpAll, 100, first, second.Add(time.Second)); len(d) != 1 || !d[0].at.Equal(second) {
		t.Fatalf("due after the first 02:30 = %v, want the second", d)
	}
}

func TestNoZoneIsUTC(t *testing.T) {
	s := mustSchedule(t, "0 3 * * *")
	if s.Location() != time.UTC {
		t.Fatalf("zone = %v, want UTC", s.Location())
	}
	n := s.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if n != time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC) {
		t.Fatalf("next = %v", n)
	}
}

func TestEveryIsAlignedToTheEpoch(t *testing.T) {
	s := mustSchedule(t, "@every 10s")
	at := time.Date(2026, 1, 1, 0, 0, 7, 500e6, time.UTC)
	if n, p := s.Next(at), s.Prev(at); n != time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC) || p != time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) {
		t.Fatalf("next %v prev %v", n, p)
	}
	if p := s.Prev(time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)); p.Second() != 10 {
		t.Fatalf("a tick is its own prev: %v", p)
	}
}

func TestPrev(t *testing.T) {
	for _, tc := range []struct{ spec, at, want string }{
		{"*/5 * * * *", "2026-05-05T10:07:00Z", "2026-05-05T10:05:00Z"},
		{"*/5 * * * *", "2026-05-05T10:05:00Z", "2026-05-05T10:05:00Z"},
		{"@hourly", "2026-05-05T10:59:59Z", "2026-05-05T10:00:00Z"},
		{"0 0 1 1 *", "2026-05-05T10:00:00Z", "2026-01-01T00:00:00Z"},
		{"@monthly", "2026-03-01T00:00:00Z", "2026-03-01T00:00:00Z"},
	} {
		at, _ := time.Parse(time.RFC3339, tc.at)
		if got := mustSchedule(t, tc.spec).Prev(at).UTC().Format(time.RFC3339); got != tc.want {
			t.Errorf("Prev(%q, %s) = %s, want %s", tc.spec, tc.at, got, tc.want)
		}
	}
}

func TestDue(t *testing.T) {
	s := mustSchedule(t, "@every 1m")
	base := time.Date(2026, 5, 5, 10, 0, 0, 0, time.UTC)
	now := base.Add(10*time.Minute + 5*time.Second)
	ticks := func(cs []tickClaim) string {
		var b []string
		for _, c := range cs {
			b = append(b, c.at.Format("15:04")+c.mode)
		}
		return strings.Join(b, " ")
	}
	for _, tc := range []struct {
		name string
		cu   CatchUp
		max  int
		last time.Time
		want string
	}{
		{"new entry", CatchUpLatest, 100, time.Time{}, "10:10n"},
		{"up to date", CatchUpLatest, 100, base.Add(10 * time.Minute), ""},
		{"next tick", CatchUpAll, 100, base.Add(9 * time.Minute), "10:10e"},
		{"latest", CatchUpLatest, 100, base.Add(6 * time.Minute), "10:10e"},
		{"none", CatchUpNone, 100, base.Add(6 * time.Minute), "10:10o"},
		{"all", CatchUpAll, 100, base.Add(6 * time.Minute), "10:07e 10:08e 10:09e 10:10e"},
		{"all, capped", CatchUpAll, 2, base.Add(6 * time.Minute), "10:09e 10:10e"},
	} {
		if got := ticks(due(s, tc.cu, tc.max, tc.last, now)); got != tc.want {
			t.Errorf("%s: due = %q, want %q", tc.name, got, tc.want)
		}
	}
	// A round that comes late (a loaded machine) finds several ticks on
	// time, within Late: every policy claims them all, none is missed.
	s = mustSchedule(t, "@every 1s")
	now = base.Add(3*time.Second + 500*time.Millisecond)
	ticks = func(cs []tickClaim) string {
		var b []string
		for _, c := range cs {
			b = append(b, c.at.Format("05")+c.mode)
		}
		return strings.Join(b, " ")
	}
	for _, tc := range []struct {
		name string
		cu   CatchUp
		max  int
		last time.Time
		want string
	}{
		{"latest, late round", CatchUpLatest, 100, base, "01e 02e 03e"},
		{"none, late round", CatchUpNone, 100, base, "01o 02o 03o"},
		{"all, late round", CatchUpAll, 1, base, "01e 02e 03e"},
		{"latest, missed and on time", CatchUpLatest, 100, base.Add(-time.Minute), "54e 55e 56e 57e 58e 59e 00e 01e 02e 03e"},
		{"all, missed and on time, capped", CatchUpAll, 12, base.Add(-time.Minute), "52e 53e 54e 55e 56e 57e 58e 59e 00e 01e 02e 03e"},
	} {
		if got := ticks(due(s, tc.cu, tc.max, tc.last, now)); got != tc.want {
			t.Errorf("%s: due = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestCheck(t *testing.T) {
	good := func() Entry { return Entry{Name: "report", Schedule: "@hourly"} }
	for _, tc := range []struct {
		key string
		mod func(*Entry)
	}{
		{"name", func(e *Entry) { e.Name = "" }},
		{"name", func(e *Entry) { e.Name = "a b" }},
		{"schedule", func(e *Entry) { e.Schedule = "" }},
		{"schedule", func(e *Entry) { e.Schedule = "61 * * * *" }},
		{"schedule", func(e *Entry) { e.Schedule = "CRON_TZ=Mars/Olympus 0 * * * *" }},
		{"schedule", func(e *Entry) { e.Schedule = "0 0 30 2 *" }},
		{"schedule", func(e *Entry) { e.Schedule = "@every 1500ms" }},
		{"schedule", func(e *Entry) { e.Schedule = "@every 100ms" }},
		{"catch_up", func(e *Entry) { e.CatchUp = "some" }},
		{"catch_up_max", func(e *Entry) { e.CatchUpMax = MaxCatchUp + 1 }},
		{"overlap", func(e *Entry) { e.Overlap = "queue" }},
		{"timeout", func(e *Entry) { e.Timeout = -time.Second }},
		{"max_attempts", func(e *Entry) { e.MaxAttempts = 1001 }},
	} {
		e := good()
		tc.mod(&e)
		err := Check([]Entry{e})
		var ee *EntryError
		if !errors.As(err, &ee) || ee.Key != tc.key {
			t.Errorf("%+v: err = %v, want an EntryError on %s", e, err, tc.key)
		}
	}
	es := []Entry{good(), good()}
	if err := Check(es); err == nil || !strings.Contains(err.Error(), "unique") {
		t.Errorf("duplicate names: err = %v", err)
	}
	es = []Entry{good()}
	if err := Check(es); err != nil || es[0].CatchUp != CatchUpLatest || es[0].CatchUpMax != DefaultCatchUpMax || es[0].Overlap != OverlapAllow {
		t.Errorf("defaults: %v %+v", err, es[0])
	}
}

func newYork(tb testing.TB) *time.Location {
	tb.Helper()
	loc, err := time.LoadLocation("America/New_York")
	if err != nil {
		tb.Fatalf("load America/New_York (install tzdata): %v", err)
	}
	return loc
}

// The two days, in New York: 8 March 2026 skips 02:00-03:00, so
// "30 2 * * *" has no tick that day (not one at 03:30, nor a catch-up of
// it: due() from the 7th's tick to the 9th's finds only the 9th's); 1
// November 2026 repeats 01:00-02:00, so "30 1 * * *" ticks twice, at 01:30
// EDT and 01:30 EST, an hour apart.
func TestDSTNewYork(t *testing.T) {
	ny := newYork(t)
	spring := mustSchedule(t, "CRON_TZ=America/New_York 30 2 * * *")
	if got, want := spring.Next(time.Date(2026, 3, 7, 12, 0, 0, 0, ny)), time.Date(2026, 3, 9, 2, 30, 0, 0, ny); !got.Equal(want) {
		t.Fatalf("next 02:30 after 7 March noon = %v, want %v (no 02:30 on the 8th)", got, want)
	}
	last := time.Date(2026, 3, 7, 2, 30, 0, 0, ny)
	if d := due(spring, CatchUpAll, 100, last, time.Date(2026, 3, 9, 2, 30, 1, 0, ny)); len(d) != 1 || !d[0].at.Equal(time.Date(2026, 3, 9, 2, 30, 0, 0, ny)) {
		t.Fatalf("due from the 7th's 02:30 to the 9th's = %v, want the 9th's alone", d)
	}
	fall := mustSchedule(t, "CRON_TZ=America/New_York 30 1 * * *")
	first := fall.Next(time.Date(2026, 10, 31, 12, 0, 0, 0, ny))
	second := fall.Next(first)
	if first.UTC() != time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC) || second.UTC() != time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC) {
		t.Fatalf("ticks on 1 November = %v, %v; want 05:30 and 06:30 UTC (01:30 EDT, 01:30 EST)", first.UTC(), second.UTC())
	}
	if p := fall.Prev(time.Date(2026, 11, 1, 12, 0, 0, 0, ny)); !p.Equal(second) {
		t.Fatalf("prev from the 1st's noon = %v, want the second 01:30 (%v)", p, second)
	}
}
