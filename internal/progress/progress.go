// Package progress draws the progress line of a long command on a terminal
// (enqueue of a large stdin, cancel of many ids, dead requeue and purge of
// many letters): how many items are done, the rate, and the time left when
// the total is known, redrawn in place at most every Options.Every, then
// one summary line.
//
//	m := progress.Start(os.Stderr, !quiet, progress.Options{Label: "cancel", Noun: "ids", Total: int64(len(ids))})
//	defer m.Finish()
//	for _, id := range ids { ...; m.Add(1) }
//
// A meter draws nothing when its writer is not a terminal or it is off
// (--quiet), nor for a small, quick run: the line appears once Total
// reaches Options.Large or the run has lasted Options.After. A nil *Meter
// is a meter that draws nothing. A Meter belongs to the one goroutine
// that runs the command.
package progress

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Options say what a meter counts and when it draws.
type Options struct {
	// Label names the command, e.g. "cancel" or "dead requeue".
	Label string
	// Noun is what is counted, plural: "jobs", "ids", "dead letters".
	Noun string
	// Total is how many items there are; 0: unknown (no percentage, no
	// time left).
	Total int64
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// Every is the shortest time between two draws; default 250ms.
	Every time.Duration
	// After is how long a run lasts before its line appears whatever
	// its size; default 500ms.
	After time.Duration
	// Large is the total from which the line appears at once; default 100.
	Large int64
}

// Meter is one command's progress line.
type Meter struct {
	w      io.Writer
	o      Options
	n      int64
	start  time.Time
	drawn  time.Time // the last draw
	shown  bool      // a line or a summary was drawn: the run is worth a summary
	onLine bool      // the line is on the terminal now (not cleared)
}

// Start returns a meter that draws on w when on is set and w is a
// terminal; else nil, which draws nothing (and for a run of one item).
func Start(w io.Writer, on bool, o Options) *Meter {
	if !on || o.Total == 1 || !IsTerminal(w) {
		return nil
	}
	return newMeter(w, o)
}

// newMeter returns a meter that draws on w whatever w is (the tests').
func newMeter(w io.Writer, o Options) *Meter {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Every <= 0 {
		o.Every = 250 * time.Millisecond
	}
	if o.After <= 0 {
		o.After = 500 * time.Millisecond
	}
	if o.Large <= 0 {
		o.Large = 100
	}
	return &Meter{w: w, o: o, start: o.Now()}
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Add counts n more items done and redraws the line when it is due.
func (m *Meter) Add(n int) {
	if m == nil {
		return
	}
	m.n += int64(n)
	now := m.o.Now()
	if !m.shown && m.o.Total < m.o.Large && now.Sub(m.start) < m.o.After {
		return // small and quick so far: no line
	}
	if m.shown && now.Sub(m.drawn) < m.o.Every {
		return
	}
	m.shown, m.onLine, m.drawn = true, true, now
	fmt.Fprint(m.w, "\r\033[K"+m.line(now))
}

// line is the progress line at now: count, of total and percentage,
// rate, time left.
func (m *Meter) line(now time.Time) string {
	var b strings.Builder
	b.WriteString(m.o.Label + ": " + Num(m.n))
	if t := m.o.Total; t > 0 {
		fmt.Fprintf(&b, " of %s %s (%d%%)", Num(t), m.o.Noun, m.n*100/t)
	} else {
		b.WriteString(" " + m.o.Noun)
	}
	el := now.Sub(m.start)
	if el <= 0 || m.n == 0 {
		return b.String()
	}
	rate := float64(m.n) / el.Seconds()
	fmt.Fprintf(&b, ", %s/s", Num(int64(rate+0.5)))
	if t := m.o.Total; t > 0 && m.n < t {
		left := time.Duration(float64(t-m.n) / rate * float64(time.Second))
		b.WriteString(", " + short(left) + " left")
	}
	return b.String()
}

// Clear takes the line off the terminal (it is drawn again at the next
// Add that is due), so that other output starts on a clean line.
func (m *Meter) Clear() {
	if m == nil || !m.onLine {
		return
	}
	m.onLine = false
	m.drawn = time.Time{} // the next Add redraws
	fmt.Fprint(m.w, "\r\033[K")
}

// Writer is out with the line cleared before each write to it: out and
// the meter's writer may be the same terminal.
func (m *Meter) Writer(out io.Writer) io.Writer {
	if m == nil {
		return out
	}
	return clearing{m, out}
}

type clearing struct {
	m   *Meter
	out io.Writer
}

func (c clearing) Write(p []byte) (int, error) {
	c.m.Clear()
	return c.out.Write(p)
}

// Finish clears the line and, when the run drew one (it was large or
// long), writes one summary line: how many, in how long, at what rate.
func (m *Meter) Finish() {
	if m == nil {
		return
	}
	m.Clear()
	if !m.shown {
		return
	}
	m.shown = false // once
	el := m.o.Now().Sub(m.start)
	s := fmt.Sprintf("%s: %s %s in %s", m.o.Label, Num(m.n), m.o.Noun, short(el))
	if el > 0 && m.n > 0 {
		s += fmt.Sprintf(" (%s/s)", Num(int64(float64(m.n)/el.Seconds()+0.5)))
	}
	fmt.Fprintln(m.w, s)
}

// Num writes n with thousands separators: 1,234,567.
func Num(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// short is d rounded for a person: 850ms, 4.2s, 3m10s, 2h5m.
func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}
