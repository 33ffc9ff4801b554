package lock

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// UnsafeDirError is a lock directory others could tamper with: Why says
// how, Fix what to run. It matches ErrUnsafeDir.
type UnsafeDirError struct {
	Dir, Why, Fix string
}

func (e *UnsafeDirError) Error() string {
	return fmt.Sprintf("%s: %s %s", ErrUnsafeDir, e.Dir, e.Why)
}

// Is makes errors.Is(err, ErrUnsafeDir) true.
func (e *UnsafeDirError) Is(target error) bool { return target == ErrUnsafeDir }

// CheckDir refuses a lock directory that another user could tamper with:
// writable by its group or by everyone without the sticky bit (they could
// rename or replace the lock files and records, or plant links), or owned
// by another user (root's is accepted). A missing directory is fine:
// TryAcquire creates it 0750.
func CheckDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return &UnsafeDirError{Dir: dir, Why: "is not a directory", Fix: "point lock_dir at a directory"}
	}
	m := fi.Mode()
	switch sticky := m&os.ModeSticky != 0; {
	case m&0o002 != 0 && !sticky:
		return &UnsafeDirError{Dir: dir, Why: "is world-writable without the sticky bit", Fix: "chmod o-w " + dir + " (or chmod +t)"}
	case m&0o020 != 0 && !sticky:
		return &UnsafeDirError{Dir: dir, Why: "is group-writable without the sticky bit: the group's other users could replace lock files and records",
			Fix: "chmod g-w " + dir + " (or give each user a lock_dir of their own)"}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if uid := uint32(os.Geteuid()); st.Uid != uid && st.Uid != 0 {
			return &UnsafeDirError{Dir: dir, Why: fmt.Sprintf("is owned by uid %d, not by this user (uid %d)", st.Uid, uid),
				Fix: fmt.Sprintf("chown %d %s, or use a lock_dir of this user's", uid, dir)}
		}
	}
	return nil
}
