package standby

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule is when cron starts candidates of one config: the union of one or
// more crontab schedules, each line firing on its own. It answers the two
// questions coverage asks of a schedule: the longest gap between consecutive
// firings (C) and the fewest lines that fire together.
//
// Times are wall-clock times in UTC: a daylight-saving shift, which moves one
// night's firings by an hour, is not modelled.
type Schedule struct {
	specs     []string
	every     time.Duration // an "@every D" schedule's period; 0 for crontab lines
	lines     []cronLine
	plans     map[uint64]*dayPlan // by mask of the lines that fire on a day
	gap       time.Duration
	minLines  int
	peakLines int
}

// MaxLines bounds the crontab lines one Schedule can combine.
const MaxLines = 64

// cycleDays is the length of the Gregorian calendar's cycle: 400 years,
// 146097 days, a whole number of weeks, so dates and weekdays repeat exactly.
const cycleDays = 146097

const minutesPerDay = 24 * 60

// ErrNeverFires means a schedule matches no date at all, e.g. "0 0 30 2 *".
var ErrNeverFires = errors.New("never fires")

// cronLine is one parsed crontab schedule.
type cronLine struct {
	minutes          []uint16 // minutes of the day that fire, ascending
	dom              uint64   // bits 1-31
	month            uint64   // bits 1-12
	dow              uint64   // bits 0-6, Sunday 0
	domStar, dowStar bool     // the field starts with '*' (cron's rule, see dayMatches)
}

// dayPlan is the firings of one day on which a given set of lines fires.
type dayPlan struct {
	minutes  []uint16 // ascending
	count    []uint8  // lines firing at minutes[i]
	maxIntra int      // longest gap between firings within the day, minutes
	minCount int      // fewest lines firing at one minute of the day
}

// ParseSchedule parses crontab schedules: five fields ("*/5 * * * 1-5") or a
// descriptor (@hourly, @daily, @weekly, @monthly, @yearly), with an optional
// CRON_TZ= prefix that is accepted and ignored. Several specs are several
// crontab lines starting the same config; their firings add up. A single
// "@every D" (whole seconds, at least 1s) is a systemd timer's or a test's
// schedule: a firing at each multiple of D since the Unix epoch, C = D; cron
// has no such syntax, so it combines with no other line.
func ParseSchedule(specs ...string) (*Schedule, error) {
	if len(specs) == 0 {
		return nil, errors.New("parse schedule: no schedule")
	}
	if len(specs) > MaxLines {
		return nil, fmt.Errorf("parse schedule: %d lines: at most %d", len(specs), MaxLines)
	}
	if s, ok, err := parseEvery(specs); ok {
		return s, err
	}
	s := &Schedule{specs: specs, plans: map[uint64]*dayPlan{}}
	for _, spec := range specs {
		l, err := parseLine(spec)
		if err != nil {
			return nil, fmt.Errorf("parse schedule %q: %w", spec, err)
		}
		s.lines = append(s.lines, l)
	}
	if err := s.measure(); err != nil {
		return nil, fmt.Errorf("schedule %s: %w", s, err)
	}
	return s, nil
}

func parseLine(spec string) (cronLine, error) {
	body := strings.TrimSpace(spec)
	if strings.HasPrefix(body, "TZ=") || strings.HasPrefix(body, "CRON_TZ=") {
		if i := strings.IndexAny(body, " \t"); i > 0 {
			body = strings.TrimSpace(body[i:])
		}
	}
	if strings.HasPrefix(body, "@every") {
		return cronLine{}, errors.New("@every is not crontab syntax: it stands alone, as a systemd timer's schedule, not with crontab lines")
	}
	if len(strings.Fields(body)) > 5 {
		return cronLine{}, fmt.Errorf("expected exactly 5 fields, found %d", len(strings.Fields(body)))
	}
	sched, err := cron.ParseStandard(spec)
	if err != nil {
		return cronLine{}, err
	}
	ss, ok := sched.(*cron.SpecSchedule)
	if !ok || ss.Second&^starBit != 1 {
		return cronLine{}, errors.New("not a crontab schedule")
	}
	l := cronLine{dom: ss.Dom &^ starBit, month: ss.Month &^ starBit, dow: ss.Dow &^ starBit}
	if f := strings.Fields(body); len(f) == 5 {
		// cron (Vixie, cronie) ORs day-of-month and day-of-week unless either
		// field starts with '*' — "*/2" included, where robfig/cron would OR.
		l.domStar, l.dowStar = isStar(f[2]), isStar(f[4])
	} else {
		l.domStar, l.dowStar = ss.Dom&starBit != 0, ss.Dow&starBit != 0
	}
	for h := 0; h < 24; h++ {
		if ss.Hour&(1<<h) == 0 {
			continue
		}
		for m := 0; m < 60; m++ {
			if ss.Minute&(1<<m) != 0 {
				l.minutes = append(l.minutes, uint16(h*60+m))
			}
		}
	}
	if len(l.minutes) == 0 {
		return cronLine{}, ErrNeverFires
	}
	return l, nil
}

// starBit is robfig/cron's marker for a field written as '*'.
const starBit = 1 << 63

func isStar(field string) bool { return strings.HasPrefix(field, "*") || strings.HasPrefix(field, "?") }

// dayMatches applies cron's day rule: when both day fields are restricted, a
// day matches either; when either starts with '*', it must match both.
func (l *cronLine) dayMatches(d civil) bool {
	if l.month&(1<<d.month) == 0 {
		return false
	}
	dom, dow := l.dom&(1<<d.day) != 0, l.dow&(1<<d.weekday) != 0
	if l.domStar || l.dowStar {
		return dom && dow
	}
	return dom || dow
}

// Gap is C: the longest time between two consecutive firings over a whole
// calendar cycle (400 years), in wall-clock time.
func (s *Schedule) Gap() time.Duration { return s.gap }

// MinLines is the fewest lines that fire at one instant: 1 for a single
// line, n for n lines with the same schedule.
func (s *Schedule) MinLines() int { return s.minLines }

// PeakLines is the most line firings within any span as long as Gap(): the
// most candidates (in units of spawn) cron can start within one gap. It is 1
// for "* * * * *" and 2 for "*/7 * * * *" (:56 and :00 within 7 minutes).
// It is capped at MaxPeak.
func (s *Schedule) PeakLines() int { return s.peakLines }

// MaxPeak caps PeakLines, so dense schedules stop counting early.
const MaxPeak = 1025

// Specs returns the crontab schedules, one per line.
func (s *Schedule) Specs() []string { return append([]string(nil), s.specs...) }

// String lists the specs, separated by " + ".
func (s *Schedule) String() string {
	q := make([]string, len(s.specs))
	for i, sp := range s.specs {
		q[i] = fmt.Sprintf("%q", sp)
	}
	return strings.Join(q, " + ")
}

// measure walks one calendar cycle day by day and records the longest gap
// between firings and the fewest lines firing at once. A cycle is 146097 days,
// so the walk is cheap; a schedule such as "0 0 29 2 *" (every leap day, with
// an 8-year gap around 2100) is measured exactly.
func (s *Schedule) measure() error {
	var (
		d                  = civil{year: 2000, month: 1, day: 1, weekday: 6}
		prevDay, prevLast  = -1, 0
		firstDay, firstMin = -1, 0
		maxGap             = 0
		minCount           = MaxLines + 1
	)
	for day := 0; day < cycleDays; day, d = day+1, d.next() {
		p := s.plan(d)
		if p == nil {
			continue
		}
		if prevDay < 0 {
			firstDay, firstMin = day, int(p.minutes[0])
		} else {
			maxGap = max(maxGap, (day-prevDay)*minutesPerDay+int(p.minutes[0])-prevLast)
		}
		maxGap = max(maxGap, p.maxIntra)
		minCount = min(minCount, p.minCount)
		prevDay, prevLast = day, int(p.minutes[len(p.minutes)-1])
	}
	if prevDay < 0 {
		return ErrNeverFires
	}
	// The cycle repeats: the last firing is followed by the first one again.
	maxGap = max(maxGap, (cycleDays-prevDay+firstDay)*minutesPerDay+firstMin-prevLast)
	if maxGap > int(math.MaxInt64/time.Minute) {
		return errors.New("fires less often than a time.Duration can count")
	}
	s.gap = time.Duration(maxGap) * time.Minute
	s.minLines = minCount
	s.peakLines = s.peak(maxGap)
	return nil
}

// peak slides a window of gap minutes over the firings and returns the most
// line firings inside it. A pattern that depends on the weekday only repeats
// weekly, so three weeks hold every window; otherwise the walk covers the
// whole cycle and a little more (the cycle wraps), stopping early once the
// count passes MaxPeak: dense schedules get there within days, and sparse
// ones are cheap to walk.
func (s *Schedule) peak(gap int) int {
	days := cycleDays + gap/minutesPerDay + 2
	if s.weekly() {
		days = 21 + gap/minutesPerDay
	}
	type firing struct{ t, n int }
	var (
		win       []firing // firings in the window, oldest first
		sum, best int
		d         = civil{year: 2000, month: 1, day: 1, weekday: 6}
	)
	for day := 0; day < days && best < MaxPeak; day, d = day+1, d.next() {
		p := s.plan(d)
		if p == nil {
			continue
		}
		for i, m := range p.minutes {
			t := day*minutesPerDay + int(m)
			win = append(win, firing{t, int(p.count[i])})
			sum += int(p.count[i])
			for win[0].t <= t-gap {
				sum -= win[0].n
				win = win[1:]
			}
			best = max(best, sum)
		}
	}
	return min(best, MaxPeak)
}

// weekly reports whether every line's days depend on the weekday alone.
func (s *Schedule) weekly() bool {
	const allMonths, allDays = 0x1ffe, 0xfffffffe
	for _, l := range s.lines {
		if l.month != allMonths || l.dom != allDays {
			return false
		}
	}
	return true
}

// plan returns the firings of day d, or nil when no line fires that day.
func (s *Schedule) plan(d civil) *dayPlan {
	var mask uint64
	for i := range s.lines {
		if s.lines[i].dayMatches(d) {
			mask |= 1 << i
		}
	}
	if mask == 0 {
		return nil
	}
	if p, ok := s.plans[mask]; ok {
		return p
	}
	var count [minutesPerDay]uint8
	for i := range s.lines {
		if mask&(1<<i) != 0 {
			for _, m := range s.lines[i].minutes {
				count[m]++
			}
		}
	}
	p := &dayPlan{minCount: MaxLines + 1}
	for m, c := range count {
		if c == 0 {
			continue
		}
		if n := len(p.minutes); n > 0 {
			p.maxIntra = max(p.maxIntra, m-int(p.minutes[n-1]))
		}
		p.minutes = append(p.minutes, uint16(m))
		p.count = append(p.count, c)
		p.minCount = min(p.minCount, int(c))
	}
	s.plans[mask] = p
	return p
}

// Next returns the first firing strictly after t and how many lines fire
// then. It returns the zero time only for a schedule that never fires, which
// ParseSchedule refuses.
func (s *Schedule) Next(t time.Time) (time.Time, int) {
	if s.every > 0 {
		n := t.UnixNano() / int64(s.every)
		if t.UnixNano() < 0 && t.UnixNano()%int64(s.every) != 0 {
			n-- // round toward minus infinity
		}
		return time.Unix(0, (n+1)*int64(s.every)).UTC(), 1
	}
	u := t.UTC()
	y, mo, dd := u.Date()
	d := civil{year: y, month: int(mo), day: dd, weekday: int(u.Weekday())}
	midnight := time.Date(y, mo, dd, 0, 0, 0, 0, time.UTC)
	// A firing at minute m of the first day is after t exactly when m > q.
	q := int(u.Sub(midnight) / time.Minute)
	for i := 0; i <= cycleDays; i, d, midnight, q = i+1, d.next(), midnight.AddDate(0, 0, 1), -1 {
		p := s.plan(d)
		if p == nil {
			continue
		}
		j := sort.Search(len(p.minutes), func(j int) bool { return int(p.minutes[j]) > q })
		if j < len(p.minutes) {
			return midnight.Add(time.Duration(p.minutes[j]) * time.Minute), int(p.count[j])
		}
	}
	return time.Time{}, 0
}

// civil is a calendar date and its weekday, stepped without time.Time.
type civil struct{ year, month, day, weekday int }

func (d civil) next() civil {
	d.weekday = (d.weekday + 1) % 7
	d.day++
	if d.day > daysIn(d.year, d.month) {
		d.day = 1
		d.month++
		if d.month > 12 {
			d.month = 1
			d.year++
		}
	}
	return d
}

func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
