package standby

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

func TestScheduleGap(t *testing.T) {
	const day = 24 * time.Hour
	for _, tc := range []struct {
		name           string
		specs          []string
		gap            time.Duration
		minLines, peak int
	}{
		{"every minute", []string{"* * * * *"}, time.Minute, 1, 1},
		{"every 7 minutes: 4 at the hour", []string{"*/7 * * * *"}, 7 * time.Minute, 1, 2},
		{"every 15 minutes", []string{"*/15 * * * *"}, 15 * time.Minute, 1, 1},
		{"office hours: the weekend", []string{"0 9-17 * * 1-5"}, 64 * time.Hour, 1, 27},
		{"weekdays every minute", []string{"* * * * mon-fri"}, 48*time.Hour + time.Minute, 1, 1025},
		{"hourly", []string{"@hourly"}, time.Hour, 1, 1},
		{"daily", []string{"@daily"}, day, 1, 1},
		{"weekly", []string{"@weekly"}, 7 * day, 1, 1},
		{"monthly: January 1 to February 1", []string{"@monthly"}, 31 * day, 1, 2},
		{"yearly: a leap year", []string{"@yearly"}, 366 * day, 1, 2},
		{"leap day: 2096 to 2104", []string{"0 0 29 2 *"}, 2921 * day, 1, 2},
		{"day of month or Monday", []string{"0 0 1 * 1"}, 7 * day, 1, 2},
		{"odd days that are Mondays (cron's rule for */2)", []string{"0 0 */2 * 1"}, 21 * day, 1, 2},
		{"time zone ignored", []string{"CRON_TZ=Europe/Berlin 0 * * * *"}, time.Hour, 1, 1},
		{"two identical lines add up", []string{"* * * * *", "* * * * *"}, time.Minute, 2, 2},
		{"two halves of the hour", []string{"0-29 * * * *", "30-59 * * * *"}, time.Minute, 1, 1},
		{"hourly at :00 and :30", []string{"0 * * * *", "30 * * * *"}, 30 * time.Minute, 1, 1},
		{"two lines overlapping at :00", []string{"*/2 * * * *", "0 * * * *"}, 2 * time.Minute, 1, 2},
		{"@every: a systemd timer", []string{"@every 1m"}, time.Minute, 1, 1},
		{"@every 90s", []string{"@every 1m30s"}, 90 * time.Second, 1, 1},
		{"@every 1s: tests", []string{"@every 1s"}, time.Second, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseSchedule(tc.specs...)
			if err != nil {
				t.Fatal(err)
			}
			if s.Gap() != tc.gap || s.MinLines() != tc.minLines || s.PeakLines() != tc.peak {
				t.Fatalf("gap %v, min lines %d, peak %d; want %v, %d, %d", s.Gap(), s.MinLines(), s.PeakLines(), tc.gap, tc.minLines, tc.peak)
			}
		})
	}
}

func TestScheduleErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		specs []string
		want  string
	}{
		{"no spec", nil, "no schedule"},
		{"February 30", []string{"0 0 30 2 *"}, "never fires"},
		{"@every with a crontab line", []string{"@every 1m", "* * * * *"}, "@every is not crontab syntax"},
		{"crontab line with @every", []string{"* * * * *", "@every 1m"}, "@every is not crontab syntax"},
		{"@every below a second", []string{"@every 500ms"}, "whole seconds, at least 1s"},
		{"@every in fractions", []string{"@every 1.5s"}, "whole seconds, at least 1s"},
		{"@every nothing", []string{"@every"}, "invalid duration"},
		{"@every zero", []string{"@every 0s"}, "whole seconds, at least 1s"},
		{"three fields", []string{"* * *"}, "expected exactly 5 fields"},
		{"six fields", []string{"0 * * * * *"}, "expected exactly 5 fields"},
		{"bad minute", []string{"61 * * * *"}, "above maximum"},
		{"@reboot", []string{"@reboot"}, "unrecognized descriptor"},
		{"too many lines", make([]string, MaxLines+1), "at most 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSchedule(tc.specs...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	if _, err := ParseSchedule("0 0 31 2,4 *"); !errors.Is(err, ErrNeverFires) {
		t.Fatalf("err = %v, want ErrNeverFires", err)
	}
}

func TestScheduleNext(t *testing.T) {
	at := func(s string) time.Time {
		tt, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return tt
	}
	for _, tc := range []struct {
		specs      []string
		from, want string
		lines      int
	}{
		{[]string{"*/7 * * * *"}, "2026-01-05T10:00:00Z", "2026-01-05T10:07:00Z", 1},
		{[]string{"*/7 * * * *"}, "2026-01-05T10:56:00.5Z", "2026-01-05T11:00:00Z", 1},
		{[]string{"*/7 * * * *"}, "2026-01-05T10:55:59.999Z", "2026-01-05T10:56:00Z", 1},
		{[]string{"0 9-17 * * 1-5"}, "2026-01-09T17:00:00Z", "2026-01-12T09:00:00Z", 1},
		{[]string{"0 0 29 2 *"}, "2097-01-01T00:00:00Z", "2104-02-29T00:00:00Z", 1},
		{[]string{"* * * * *", "*/2 * * * *"}, "2026-01-05T10:00:00Z", "2026-01-05T10:01:00Z", 1},
		{[]string{"* * * * *", "*/2 * * * *"}, "2026-01-05T10:01:00Z", "2026-01-05T10:02:00Z", 2},
		{[]string{"0 12 * * *"}, "2026-01-05T13:00:00+02:00", "2026-01-05T12:00:00Z", 1},
		{[]string{"0 12 * * *"}, "2026-01-05T12:00:00Z", "2026-01-06T12:00:00Z", 1},
		{[]string{"@every 1m"}, "2026-01-05T12:00:00Z", "2026-01-05T12:01:00Z", 1},
		{[]string{"@every 1m"}, "2026-01-05T12:00:59.999Z", "2026-01-05T12:01:00Z", 1},
		{[]string{"@every 7s"}, "1970-01-01T00:00:13Z", "1970-01-01T00:00:14Z", 1},
		{[]string{"@every 7s"}, "1969-12-31T23:59:50Z", "1969-12-31T23:59:53Z", 1},
		{[]string{"@every 10s"}, "2026-01-05T13:00:05+02:00", "2026-01-05T11:00:10Z", 1},
	} {
		t.Run(strings.Join(tc.specs, "+")+"@"+tc.from, func(t *testing.T) {
			s, err := ParseSchedule(tc.specs...)
			if err != nil {
				t.Fatal(err)
			}
			got, n := s.Next(at(tc.from))
			if !got.Equal(at(tc.want)) || n != tc.lines {
				t.Fatalf("Next = %v (%d lines), want %v (%d)", got, n, tc.want, tc.lines)
			}
		})
	}
}

// FuzzSchedule checks the gap and Next against robfig/cron's own Next, an
// independent implementation, wherever the two agree on the day rule.
func FuzzSchedule(f *testing.F) {
	for _, s := range []string{
		"* * * * *", "*/7 * * * *", "0 9-17 * * 1-5", "@hourly", "@weekly", "0 0 29 2 *",
		"5,10 */3 1-15 jan,jul *", "0 0 1 * 1", "0 0 */2 * 1", "30 23 31 * *", "0-59/13 0-23/5 * * sun", "@every 7s",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := ParseSchedule(spec)
		if err != nil {
			return
		}
		if s.Gap() <= 0 || s.Gap() > 200*366*24*time.Hour || s.MinLines() != 1 {
			t.Fatalf("%q: gap %v, min lines %d", spec, s.Gap(), s.MinLines())
		}
		if d := s.Every(); d > 0 {
			t0 := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
			if n1, _ := s.Next(t0); !n1.After(t0) || n1.Sub(t0) > d || n1.UnixNano()%int64(d) != 0 {
				t.Fatalf("%q: Next(%v) = %v", spec, t0, n1)
			}
			return
		}
		ref, _ := cron.ParseStandard(spec)
		rs := ref.(*cron.SpecSchedule)
		rs.Location = time.UTC
		l := s.lines[0]
		sameRule := (rs.Dom&starBit != 0) == l.domStar && (rs.Dow&starBit != 0) == l.dowStar
		start := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
		prev, maxSeen := start, time.Duration(0)
		var window []time.Time // firings within Gap() of the latest
		for i := 0; i < 2000 && prev.Sub(start) < 3*366*24*time.Hour; i++ {
			next, n := s.Next(prev)
			if next.IsZero() || !next.After(prev) || n != 1 {
				t.Fatalf("%q: Next(%v) = %v, %d", spec, prev, next, n)
			}
			if sameRule {
				if want := rs.Next(prev); !want.IsZero() && !want.Equal(next) {
					t.Fatalf("%q: Next(%v) = %v, robfig/cron says %v", spec, prev, next, want)
				}
			}
			if i > 0 {
				maxSeen = max(maxSeen, next.Sub(prev))
			}
			window = append(window, next)
			for next.Sub(window[0]) >= s.Gap() {
				window = window[1:]
			}
			if len(window) > s.PeakLines() && s.PeakLines() < MaxPeak {
				t.Fatalf("%q: %d firings within %v, PeakLines() = %d", spec, len(window), s.Gap(), s.PeakLines())
			}
			prev = next
		}
		if maxSeen > s.Gap() {
			t.Fatalf("%q: saw a gap of %v, longer than Gap() = %v", spec, maxSeen, s.Gap())
		}
		weekly := l.month == 0x1ffe && (l.dom == 0xfffffffe || !l.domStar && !l.dowStar && l.dow == 0x7f)
		if weekly && prev.Sub(start) > 15*24*time.Hour && maxSeen != s.Gap() {
			t.Fatalf("%q: a weekly pattern observed over two weeks has max gap %v, Gap() = %v", spec, maxSeen, s.Gap())
		}
	})
}
