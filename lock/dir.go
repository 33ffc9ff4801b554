package lock

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// CheckDir refuses a lock directory that another user could tamper with:
// world-writable without the sticky bit, or owned by another user (root's is
// accepted). A missing directory is fine: TryAcquire creates it 0750.
func CheckDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrUnsafeDir, dir)
	}
	if m := fi.Mode(); m&0o002 != 0 && m&os.ModeSticky == 0 {
		return fmt.Errorf("%w: %s is world-writable without the sticky bit (chmod o-w or +t)", ErrUnsafeDir, dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if uid := uint32(os.Geteuid()); st.Uid != uid && st.Uid != 0 {
			return fmt.Errorf("%w: %s is owned by uid %d, not by this user (uid %d)", ErrUnsafeDir, dir, st.Uid, uid)
		}
	}
	return nil
}
