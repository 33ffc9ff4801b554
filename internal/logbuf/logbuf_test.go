package logbuf

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pipe is a real pipe, its buffer made as small as the kernel allows (a
// page) when small, closed when the test ends.
func pipe(tb testing.TB, small bool) (r, w *os.File) {
	tb.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	if small {
		if _, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, 4096); err != nil {
			tb.Fatalf("shrink the pipe: %v", err)
		}
	}
	tb.Cleanup(func() { _, _ = r.Close(), w.Close() })
	return r, w
}

// readAll reads r's lines in the background until EOF.
func readAll(r io.Reader) func() []string {
	var lines []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
	}()
	return func() []string { <-done; return lines }
}

// within runs f and fails the test if it has not returned within d.
func within(tb testing.TB, d time.Duration, what string, f func()) {
	tb.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		tb.Fatalf("not within %v: %s", d, what)
	}
}

// TestOrder: lines from several goroutines come out whole, each
// goroutine's in the order written, none lost while the reader reads, and
// Close flushes them all.
func TestOrder(t *testing.T) {
	t.Parallel()
	r, pw := pipe(t, false)
	lines := readAll(r)
	w := New(pw, Options{})
	const writers, each = 4, 2000
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				fmt.Fprintf(w, "%d %d\n", g, i)
			}
		}()
	}
	wg.Wait()
	if err := w.Close(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	next := make([]int, writers)
	got := lines()
	for _, l := range got {
		var g, i int
		if _, err := fmt.Sscanf(l, "%d %d", &g, &i); err != nil || g < 0 || g >= writers || i != next[g] {
			t.Fatalf("line %q out of order or torn (next of each writer %v)", l, next)
		}
		next[g]++
	}
	if len(got) != writers*each || w.Dropped() != 0 {
		t.Fatalf("%d lines, %d dropped, want %d and none", len(got), w.Dropped(), writers*each)
	}
}

// TestStalledReader: the reader stops reading but keeps the pipe open.
// Writes still return at once; what does not fit is dropped and counted;
// once the reader is back, notices say how many lines went missing, where
// they went missing, and every line kept comes out in order.
func TestStalledReader(t *testing.T) {
	t.Parallel()
	r, pw := pipe(t, true)
	w := New(pw, Options{Max: 1024})
	const n = 2000
	within(t, 10*time.Second, "writes return while nothing reads", func() {
		for i := range n {
			fmt.Fprintf(w, "line %d\n", i)
		}
	})
	if w.Dropped() == 0 {
		t.Fatalf("no line dropped: %d lines cannot fit in a 4 KiB pipe and a 1 KiB buffer", n)
	}
	lines := readAll(r) // the reader is back, while lines keep coming
	for i := n; i < 2*n; i++ {
		fmt.Fprintf(w, "line %d\n", i)
	}
	if err := w.Close(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	next, noted, notices := 0, uint64(0), 0
	for _, l := range lines() {
		if strings.HasPrefix(l, "log: dropped ") {
			k, err := strconv.ParseUint(strings.Fields(l)[2], 10, 64)
			if err != nil || l != fmt.Sprintf("log: dropped %d lines: log reader stalled", k) {
				t.Fatalf("notice %q", l)
			}
			noted += k
			notices++
			continue
		}
		i, err := strconv.Atoi(strings.TrimPrefix(l, "line "))
		if err != nil || i < next {
			t.Fatalf("line %q after line %d", l, next-1)
		}
		if uint64(i-next) != noted {
			t.Fatalf("%d lines missing before %q, notices say %d", i-next, l, noted)
		}
		next, noted = i+1, 0
	}
	if uint64(2*n-next) != noted || notices == 0 {
		t.Fatalf("%d lines missing at the end, notices say %d; %d notices", 2*n-next, noted, notices)
	}
}

// TestDropsAtTheEnd: lines dropped with nothing logged after them still
// get their notice, when the reader is back.
func TestDropsAtTheEnd(t *testing.T) {
	t.Parallel()
	r, pw := pipe(t, true)
	w := New(pw, Options{Max: 512, Notice: func(n uint64) []byte { return fmt.Appendf(nil, `{"dropped":%d}`+"\n", n) }})
	for i := range 1000 {
		fmt.Fprintf(w, "line %d\n", i)
	}
	dropped := w.Dropped()
	lines := readAll(r)
	if err := w.Close(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	got := lines()
	var noted uint64
	for _, l := range got {
		var k uint64
		if _, err := fmt.Sscanf(l, `{"dropped":%d}`, &k); err == nil {
			noted += k
		}
	}
	if last := got[len(got)-1]; dropped == 0 || noted != dropped || !strings.HasPrefix(last, `{"dropped":`) {
		t.Fatalf("dropped %d, notices say %d, last line %q: want the last line a notice", dropped, noted, last)
	}
}

// TestCloseStalled: Close gives up after its wait when the reader never
// comes back, and says so; later lines are dropped, not written.
func TestCloseStalled(t *testing.T) {
	t.Parallel()
	_, pw := pipe(t, true)
	w := New(pw, Options{})
	for i := range 1000 {
		fmt.Fprintf(w, "line %d\n", i)
	}
	var err error
	start := time.Now()
	within(t, 10*time.Second, "Close returns", func() { err = w.Close(200 * time.Millisecond) })
	if !errors.Is(err, ErrStalled) {
		t.Fatalf("Close: %v after %v, want ErrStalled", err, time.Since(start))
	}
	before := w.Dropped()
	fmt.Fprintln(w, "late")
	if w.Dropped() != before+1 {
		t.Fatalf("a line written after Close was not dropped")
	}
}

// BenchmarkWrite is the cost of a log line to the logging goroutine.
func BenchmarkWrite(b *testing.B) {
	w := New(io.Discard, Options{})
	line := []byte(`{"level":"info","queue":"default","pid":1234,"time":"2026-01-01T00:00:00.000Z","message":"job output"}` + "\n")
	b.ReportAllocs()
	for b.Loop() {
		_, _ = w.Write(line)
	}
	_ = w.Close(time.Second)
}
