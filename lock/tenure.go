package lock

import (
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The tenure is a holder's hard deadline, kept where a full disk cannot
// keep it from being written: in place, at the start of the slot's lock
// file. A record is a new file each time (replaced by rename), and on a
// full disk it cannot be written at all: a holder without one could not be
// proven overdue, and a frozen one would keep its slot forever. The lock
// file is never unlinked nor truncated, so the tenureSize bytes the first
// holder of a slot wrote stay allocated, and every later holder overwrites
// them, which takes no new space (on tmpfs, ext4 and xfs). A holder that
// can publish its deadline neither way refuses the slot
// (ErrDeadlineUnpublished).
//
// Layout, tenureSize bytes, space-padded, one line:
//
//	baton-tenure 1 <pid> <start ticks> <since ns> <deadline ns> <boot deadline ns> <crc32 hex>
//
// A reader may catch a write half done (nothing locks the lock file's
// content): the checksum makes it unreadable, never a mix of two tenures.

// ErrDeadlineUnpublished is Publish failing to put a record's hard deadline
// anywhere others read it (neither the record nor the lock file's tenure
// could be written): a frozen holder could never be healed, so the holder
// must not hold the slot.
var ErrDeadlineUnpublished = errors.New("hard deadline not published")

const (
	tenureSize  = 128
	tenureMagic = "baton-tenure 1"
)

// encodeTenure is r's tenure, tenureSize bytes.
func encodeTenure(r Record) []byte {
	body := fmt.Sprintf("%s %d %d %d %d %d", tenureMagic, r.PID, r.Start, r.Since.UnixNano(), r.Deadline.UnixNano(), int64(r.BootDeadline))
	line := fmt.Sprintf("%s %08x", body, crc32.ChecksumIEEE([]byte(body)))
	b := []byte(line + strings.Repeat(" ", tenureSize-1-len(line)) + "\n")
	return b
}

// decodeTenure reads a tenure written by encodeTenure: a Held record with
// PID, Start, Since, Deadline and BootDeadline.
func decodeTenure(b []byte) (Record, bool) {
	f := strings.Fields(string(b))
	if len(f) != 8 || f[0]+" "+f[1] != tenureMagic {
		return Record{}, false
	}
	body := strings.Join(f[:7], " ")
	if sum, err := strconv.ParseUint(f[7], 16, 32); err != nil || uint32(sum) != crc32.ChecksumIEEE([]byte(body)) {
		return Record{}, false
	}
	var n [5]int64
	for i := range n {
		v, err := strconv.ParseInt(f[2+i], 10, 64)
		if err != nil {
			return Record{}, false
		}
		n[i] = v
	}
	r := Record{Held: true, PID: int(n[0]), Start: uint64(n[1]), Deadline: time.Unix(0, n[3]), BootDeadline: time.Duration(n[4])}
	if n[2] != 0 {
		r.Since = time.Unix(0, n[2])
	}
	return r, r.PID > 0 && n[3] > 0
}

// readTenure reads the tenure at the start of slot i's lock file: the last
// holder's that wrote one, alive or not (the caller checks).
func (s *FileSet) readTenure(i int) (Record, bool) {
	fd, err := syscall.Open(s.Path(i), syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return Record{}, false
	}
	defer syscall.Close(fd)
	b := make([]byte, tenureSize)
	n, err := syscall.Pread(fd, b, 0)
	if err != nil || n != tenureSize {
		return Record{}, false
	}
	r, ok := decodeTenure(b)
	r.Slot, r.Role = i, s.role
	return r, ok
}

// sameTenure reports whether a and b describe one holder's one tenure.
func sameTenure(a, b Record) bool {
	return a.PID == b.PID && a.Start == b.Start && a.Deadline.Equal(b.Deadline)
}

// writeTenure writes r's tenure in place at the start of the lock file,
// unless r has no deadline or it is already there; sl.mu held.
func (sl *fileSlot) writeTenure(r Record) error {
	if r.Deadline.IsZero() {
		return nil
	}
	b := encodeTenure(r)
	if string(b) == string(sl.tenure) {
		return nil
	}
	if _, err := sl.beacon.WriteAt(b, 0); err != nil {
		return fmt.Errorf("write tenure in lock file: %w", err)
	}
	sl.tenure = b
	return nil
}
