package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/standby"
	"golang.org/x/sys/unix"
)

// Network filesystems by statfs magic: flock on them is emulated or absent.
var networkFS = map[int64]string{
	0x6969:     "NFS",
	0xFF534D42: "CIFS",
	0xFE534D42: "SMB2",
	0x517B:     "SMB",
	0x65735546: "FUSE",
	0x00C36400: "Ceph",
	0x01021997: "9P",
	0x47504653: "GPFS",
	0x0BD00BD0: "Lustre",
}

// checkLockDir looks at the lock directory without creating or locking
// anything: it must exist or be creatable, be writable, be safe from other
// users, and sit on a local filesystem.
func checkLockDir(dir string) standby.Relation {
	r := standby.Relation{Name: "lock-dir", Formula: "usable, local", Values: dir, Margin: "-",
		Why: "the run and standby slots are flock'd files in this directory"}
	fail := func(why, fix string) standby.Relation {
		r.Status, r.Why, r.Fix = standby.Fail, why, fix
		return r
	}
	fi, err := os.Stat(dir)
	target := dir
	switch {
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOTDIR):
		parent, isDir := nearestExisting(dir)
		if !isDir {
			return fail("it cannot be created: "+parent+" is not a directory", "point lock_dir at a directory on a local disk")
		}
		if unix.Access(parent, unix.W_OK|unix.X_OK) != nil {
			return fail(fmt.Sprintf("it does not exist and %s, where the first run would create it, is not writable by uid %d", parent, os.Getuid()),
				fmt.Sprintf("create %s for uid %d (mkdir -m 750)", dir, os.Getuid()))
		}
		r.Values = dir + " (missing: the first run creates it in " + parent + ")"
		target = parent
	case err != nil:
		return fail(err.Error(), "make "+dir+" readable")
	case !fi.IsDir():
		return fail("it is not a directory", "point lock_dir at a directory")
	default:
		if err := lock.CheckDir(dir); err != nil {
			fix := "chmod o-w,g-w " + dir + " (or chmod +t), and make it owned by this user"
			if ud := (*lock.UnsafeDirError)(nil); errors.As(err, &ud) {
				fix = ud.Fix
			}
			return fail(err.Error(), fix)
		}
		if unix.Access(dir, unix.W_OK|unix.X_OK) != nil {
			return fail(fmt.Sprintf("not writable by uid %d", os.Getuid()), fmt.Sprintf("chown %d %s", os.Getuid(), dir))
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err == nil {
		if name, ok := networkFS[int64(st.Type)]; ok {
			r.Status = standby.Warn
			r.Why = "it is on " + name + ": flock there is emulated or unsafe, so two holders could share a slot"
			r.Fix = "move lock_dir to a local disk, e.g. " + config.DefaultLockDir()
		}
	}
	return r
}

// nearestExisting returns the closest ancestor of dir (or dir) that exists,
// and whether it is a directory.
func nearestExisting(dir string) (string, bool) {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil {
			return d, fi.IsDir()
		}
		if d == filepath.Dir(d) {
			return d, false
		}
	}
}

// checkRecordedSlots compares slots with the run slot files in the lock dir
// (<queue>.run.<i>). Files above the new count mean slots was lowered: their
// holders keep running, uncounted, until they retire. It reads the directory
// and the holders' records only; it never opens a lock file.
func checkRecordedSlots(dir, queue string, slots int) standby.Relation {
	r := standby.Relation{Name: "lock-dir-slots", Formula: "run slot files ≤ slots", Margin: "-",
		Why: "a holder of a slot above a lowered slots count runs uncounted until it retires"}
	ents, err := os.ReadDir(dir)
	if err != nil {
		r.Values = "no lock files yet"
		return r
	}
	prefix := queue + "." + lock.RoleRun + "."
	var above []int
	files := 0
	for _, e := range ents {
		i, err := strconv.Atoi(strings.TrimPrefix(e.Name(), prefix))
		if !strings.HasPrefix(e.Name(), prefix) || err != nil || i < 0 {
			continue
		}
		files = max(files, i+1)
		if i >= slots {
			above = append(above, i)
		}
	}
	r.Values = fmt.Sprintf("%d ≤ %d", files, slots)
	r.Margin = fmt.Sprintf("%+d slots", slots-files)
	if len(above) == 0 {
		return r
	}
	sort.Ints(above)
	r.Status = standby.Warn
	r.Why = fmt.Sprintf("the lock dir has run slot files up to %s.run.%d: slots was %d or more and is now %d",
		queue, files-1, files, slots)
	if held := heldAbove(dir, queue, files, slots); len(held) > 0 {
		r.Why += "; still held: " + strings.Join(held, ", ") + ", running beyond slots until they retire"
	}
	r.Fix = "none needed once their holders have retired (within lifetime + jitter + shutdown_grace); " +
		"their pending jobs are claimed after visibility_timeout"
	return r
}

// heldAbove names the run slots ≥ slots whose records show a live holder.
func heldAbove(dir, queue string, files, slots int) []string {
	set, err := lock.NewFileSet(dir, queue, lock.RoleRun, files)
	if err != nil {
		return nil
	}
	recs, err := set.Records()
	if err != nil {
		return nil
	}
	var held []string
	for _, rec := range recs[slots:] {
		if rec.Held {
			held = append(held, fmt.Sprintf("run.%d (pid %d)", rec.Slot, rec.PID))
		}
	}
	return held
}
