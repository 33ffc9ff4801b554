package progress

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/ptytest"
)

// fakeClock moves only when told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *fakeClock               { return &fakeClock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }
func lines(s string) []string            { return strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\r\033[K") }

// TestMeterLine: count, total and percentage, rate, time left, redrawn at
// most every 250ms whatever the number of Adds; one summary at the end.
func TestMeterLine(t *testing.T) {
	c := newClock()
	var b bytes.Buffer
	m := newMeter(&b, Options{Label: "cancel", Noun: "ids", Total: 1000, Now: c.now})
	for i := 0; i < 400; i++ { // 400 ids in 2s: 200/s, 3s left
		c.add(5 * time.Millisecond)
		m.Add(1)
	}
	draws := strings.Count(b.String(), "\r\033[K")
	if draws < 7 || draws > 9 { // 2s at most every 250ms, the first at once (Total is large)
		t.Errorf("%d draws in 2s of 400 Adds, want 8 or so:\n%q", draws, b.String())
	}
	last := lines(b.String())
	if got := last[len(last)-1]; !strings.HasPrefix(got, "cancel: 3") || !strings.Contains(got, "of 1,000 ids (3") ||
		!strings.Contains(got, ", 200/s, 3.") || !strings.HasSuffix(got, "s left") {
		t.Errorf("line %q, want cancel: 3xx of 1,000 ids (3x%%), 200/s, 3.xs left", got)
	}
	for i := 0; i < 600; i++ {
		c.add(5 * time.Millisecond)
		m.Add(1)
	}
	b.Reset()
	m.Finish()
	if got := b.String(); got != "\r\033[Kcancel: 1,000 ids in 5s (200/s)\n" {
		t.Errorf("summary %q", got)
	}
	b.Reset()
	m.Finish()
	if b.Len() != 0 {
		t.Errorf("a second Finish wrote %q", b.String())
	}
}

// TestMeterSmallQuiet: a small quick run draws nothing, not even a
// summary; a small one that lasts draws after 500ms; an unknown total has
// no percentage and no time left.
func TestMeterSmallQuiet(t *testing.T) {
	c := newClock()
	var b bytes.Buffer
	m := newMeter(&b, Options{Label: "cancel", Noun: "ids", Total: 3, Now: c.now})
	for range 3 {
		c.add(100 * time.Millisecond)
		m.Add(1)
	}
	m.Finish()
	if b.Len() != 0 {
		t.Errorf("a run of 3 ids in 300ms wrote %q", b.String())
	}
	m = newMeter(&b, Options{Label: "enqueue", Noun: "jobs", Now: c.now})
	c.add(400 * time.Millisecond)
	m.Add(40)
	if b.Len() != 0 {
		t.Fatalf("drawn before 500ms: %q", b.String())
	}
	c.add(400 * time.Millisecond)
	m.Add(40)
	if got := b.String(); got != "\r\033[Kenqueue: 80 jobs, 100/s" {
		t.Errorf("unknown total: %q", got)
	}
	// Output between draws clears the line first, and the next Add redraws.
	var out bytes.Buffer
	b.Reset()
	w := m.Writer(&b)
	w.Write([]byte("an id\n"))
	if got := b.String(); got != "\r\033[Kan id\n" {
		t.Errorf("a write through Writer: %q", got)
	}
	w.Write([]byte("another\n"))
	if got := b.String(); got != "\r\033[Kan id\nanother\n" {
		t.Errorf("a second write clears again: %q", got)
	}
	c.add(10 * time.Millisecond)
	m.Add(1)
	if !strings.HasSuffix(b.String(), "\r\033[Kenqueue: 81 jobs, 100/s") {
		t.Errorf("no redraw after a write: %q", b.String())
	}
	_ = out
	var nilMeter *Meter
	nilMeter.Add(1)
	nilMeter.Finish()
	if nilMeter.Writer(&out) != &out {
		t.Error("a nil meter's Writer is not its argument")
	}
}

// TestStartOnTerminalOnly: Start draws on a pty, never on a pipe, a file,
// or a terminal when off (--quiet).
func TestStartOnTerminalOnly(t *testing.T) {
	term := ptytest.Open(t)
	if !IsTerminal(term.TTY) {
		t.Fatal("a pty is not a terminal")
	}
	m := Start(term.TTY, true, Options{Label: "dead purge", Noun: "dead letters", Total: 500})
	if m == nil {
		t.Fatal("Start on a pty drew nothing")
	}
	m.Add(500)
	m.Finish()
	if off := Start(term.TTY, false, Options{Total: 500}); off != nil {
		t.Error("Start when off (--quiet) made a meter")
	}
	term.Close()
	if got := term.Output(); !strings.Contains(got, "dead purge: 500 of 500 dead letters (100%)") || !strings.Contains(got, "dead purge: 500 dead letters in") {
		t.Errorf("pty got %q", got)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if IsTerminal(w) || Start(w, true, Options{Total: 500}) != nil {
		t.Error("a pipe counts as a terminal")
	}
	f, err := os.Create(t.TempDir() + "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) || IsTerminal(&bytes.Buffer{}) {
		t.Error("a file or a buffer counts as a terminal")
	}
}

func TestNum(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := Num(n); got != want {
			t.Errorf("Num(%d) = %q, want %q", n, got, want)
		}
	}
}
