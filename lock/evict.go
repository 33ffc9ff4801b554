package lock

import (
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/baton-run/baton/internal/proc"
	"golang.org/x/sys/unix"
)

var _ Evicter = (*FileSet)(nil)

// Overdue implements Evicter. It reads each slot's record and the tenure
// in its lock file: a holder that could not write its record (a full disk)
// has its deadline there.
func (s *FileSet) Overdue(now time.Time, margin time.Duration) []Record {
	var out []Record
	for i := 0; i < s.n; i++ {
		r, ok := s.parseRecord(i)
		if ok && r.Overdue(now, margin) {
			out = append(out, r)
		}
		if t, tok := s.readTenure(i); tok && t.Overdue(now, margin) && !(ok && sameTenure(r, t)) {
			out = append(out, t)
		}
	}
	return out
}

// live returns r's tenure of slot r.Slot as its record, or else the
// tenure in the lock file, shows it now, when its process still lives.
func (s *FileSet) live(r Record) (Record, bool) {
	if cur, ok := s.readRecord(r.Slot); ok && sameTenure(cur, r) {
		return cur, true
	}
	if t, ok := s.readTenure(r.Slot); ok && sameTenure(t, r) && proc.Alive(t.PID, t.Start) {
		return t, true
	}
	return Record{}, false
}

// Evict implements Evicter. Only provable kills: the record (or the tenure
// in the lock file) is read again from this set's dir, and the pid must
// match its start time and hold a flock on the slot's lock file (or on an
// unlinked file of that path) per /proc/locks. Nothing is read from /proc
// unless r is overdue.
func (s *FileSet) Evict(r Record, now time.Time, margin time.Duration) (int, error) {
	if r.Slot < 0 || r.Slot >= s.n || !r.Overdue(now, margin) {
		return 0, nil
	}
	cur, ok := s.live(r)
	if !ok || !bootOverdue(cur, margin) || !oldEnough(r, margin) || !holdsSlot(r.PID, s.Path(r.Slot)) {
		return 0, nil
	}
	// Spare its descendants that hold a flock: candidates it spawned are its
	// children for life and may be healthy holders or standbys.
	fl, _ := flocks()
	n := proc.KillTreeExcept(r.PID, r.Start, func(pid int) bool {
		for _, e := range fl {
			if e.pid == pid {
				return true
			}
		}
		return false
	})
	// Its lock goes when its last thread has closed the descriptor table,
	// which can be after its main thread shows as a zombie; and the kernel
	// closes files before it marks the process a zombie. Wait for both.
	for end := time.Now().Add(time.Second); (locksHeldBy(r.PID) || proc.Alive(r.PID, r.Start)) && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	return n, nil
}

// locksHeldBy reports whether /proc/locks lists a flock of pid.
func locksHeldBy(pid int) bool {
	fl, err := flocks()
	if err != nil {
		return false
	}
	for _, e := range fl {
		if e.pid == pid {
			return true
		}
	}
	return false
}

// BootClock is the time since boot on CLOCK_BOOTTIME, the clock of
// Record.BootDeadline; 0 when it cannot be read.
func BootClock() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// bootOverdue reports whether the boot clock is past r's BootDeadline plus
// margin; true for records without one (the wall clock and oldEnough judge).
func bootOverdue(r Record, margin time.Duration) bool {
	now := BootClock()
	return r.BootDeadline == 0 || now == 0 || now > r.BootDeadline+margin
}

// oldEnough guards against a wall clock stepped forward, which would make a
// live holder look overdue: the process must have lived, by the boot clock,
// at least its tenure (Since to Deadline) plus margin. A genuinely overdue
// holder always has (it started before Since); a holder that started less
// than that ago cannot be overdue whatever the wall clock says.
func oldEnough(r Record, margin time.Duration) bool {
	if r.Since.IsZero() {
		return true
	}
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return true // no boot clock to check against: the wall clock alone
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return true
	}
	up, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return true
	}
	// Start is in clock ticks since boot: USER_HZ, 100 on every Linux ABI.
	age := time.Duration((up - float64(r.Start)/100) * float64(time.Second))
	return age >= r.Deadline.Sub(r.Since)+margin
}
