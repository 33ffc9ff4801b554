package lock

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/baton-run/baton/internal/atomicfile"
	"github.com/baton-run/baton/internal/proc"
	"golang.org/x/sys/unix"
)

// FileSet is a Set of flock'd files <dir>/<queue>.<role>.<i>; each holder's
// record is <dir>/<queue>.<role>.<i>.json, replaced atomically by rename.
// Lock files are created when missing and never unlinked: unlink and re-create
// would let two processes hold one slot on two inodes.
type FileSet struct {
	dir, queue, role string
	target           string // what the queue's jobs live in (WithTarget), "" when unsaid
	n                int
	watch            time.Duration // how often a holder checks its lock file
	guard            *guard        // set on a Guarded view only
}

var _ Set = (*FileSet)(nil)

// NewFileSet describes a set; it touches nothing on disk.
func NewFileSet(dir, queue, role string, n int) (*FileSet, error) {
	if role != RoleRun && role != RoleStandby && role != RoleHost {
		return nil, fmt.Errorf("lock: unknown role %q", role)
	}
	if n < 1 {
		return nil, fmt.Errorf("lock: %s set of %d slots", role, n)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	return &FileSet{dir: abs, queue: queue, role: role, n: n, watch: time.Second}, nil
}

// WithTarget returns a copy of s whose holders name target, the Redis
// server and database of the queue (config's RedisTarget), in their
// records, and for which Foreign tells another target's holders apart.
func (s *FileSet) WithTarget(target string) *FileSet {
	c := *s
	c.target = target
	return &c
}

// Foreign returns the record of a live holder of one of s's slots that
// names a Redis target other than s's: another deployment (say staging,
// on another database) using the same lock dir and queue name, whose
// holders take this one's slots. Records without a target (older
// versions), and a set without one, are never foreign. It reads the
// records, and /proc for foreign ones only; it takes no lock.
func (s *FileSet) Foreign() (Record, bool) {
	if s.target == "" {
		return Record{}, false
	}
	for i := 0; i < s.n; i++ {
		// /proc is read only for a foreign record: a stale one (its
		// holder died) must not refuse the slot it left free.
		if r, ok := s.parseRecord(i); ok && r.Held && r.Target != "" && r.Target != s.target && proc.Alive(r.PID, r.Start) {
			return r, true
		}
	}
	return Record{}, false
}

// Size implements Set.
func (s *FileSet) Size() int { return s.n }

// Lowest implements Set: the same files, the same target.
func (s *FileSet) Lowest(k int) (Set, error) {
	l, err := NewFileSet(s.dir, s.queue, s.role, k)
	if err != nil {
		return nil, err
	}
	return l.WithTarget(s.target), nil
}

// Capabilities implements Set: flock files heal overdue holders, wake
// waiters (inotify), give standbys a guarded view, and may be shared by
// another deployment.
func (s *FileSet) Capabilities() Capabilities {
	return Capabilities{Evicter: s, Watcher: s, Guarded: s, Shared: s}
}

// Dir is the lock directory.
func (s *FileSet) Dir() string { return s.dir }

// Path is the lock file of slot i.
func (s *FileSet) Path(i int) string {
	return filepath.Join(s.dir, s.queue+"."+s.role+"."+strconv.Itoa(i))
}

func (s *FileSet) recordPath(i int) string { return s.Path(i) + ".json" }

// TryAcquire implements Set. It tries every slot once, starting at a random
// one: when fewer holders than slots run, every slot is still taken now and
// then, so work left pending on any slot is replayed soon.
//
// A slot is taken only when no live process still holds a lock on an
// unlinked file of the same path (checked on every win, never on a loss):
// the kernel keeps that lock, so taking the new file would make two holders
// of one slot. Such a slot counts as held.
func (s *FileSet) TryAcquire() (Slot, bool, error) {
	if err := os.MkdirAll(s.dir, 0o750); err != nil {
		return nil, false, fmt.Errorf("create lock dir: %w", err)
	}
	first := rand.IntN(s.n)
	for k := 0; k < s.n; k++ {
		i := (first + k) % s.n
		path := s.Path(i)
		f, _, ok, err := tryLock(path)
		if err != nil {
			return nil, false, err
		}
		if !ok {
			continue
		}
		st, named := names(path, f)
		if !named {
			_ = f.Close()
			continue
		}
		sl := &fileSlot{set: s, i: i, f: f, lost: make(chan struct{}), stop: make(chan struct{})}
		if prev, ok := s.parseRecord(i); ok {
			sl.prev = &prev
		}
		// Every win checks (a loss never does): a holder frozen for long, or
		// whose record went with the dir, may hold an unlinked file of this
		// path however old the new file is. A guarded view (Guarded) checked
		// when its wait began and vouches while nothing changed the file.
		if (s.guard == nil || !s.guard.vouch(i, st.Dev, st.Ino)) && stillHeld(path) {
			_ = f.Close()
			continue
		}
		if err := sl.open(st.Ino); err != nil {
			_ = f.Close()
			return nil, false, err
		}
		if err := sl.watchStart(); err != nil {
			_ = sl.f.Close()
			_ = sl.beacon.Close()
			return nil, false, err
		}
		keep(sl)
		return sl, true, nil
	}
	return nil, false, nil
}

// names reports whether path still names f, the file locked, with f's
// stat: a file unlinked or replaced between the open and the lock is
// nobody's slot (and a holder of it would be one a guard cannot see).
func names(path string, f *os.File) (syscall.Stat_t, bool) {
	var st syscall.Stat_t
	now, err := inode(path)
	return st, err == nil && syscall.Fstat(int(f.Fd()), &st) == nil && st.Ino == now
}

// stillHeld reports whether another live process holds a lock on a file that
// path named before it was unlinked.
func stillHeld(path string) bool {
	held, err := deletedHolders([]string{path}, os.Getpid())
	return err == nil && held[0]
}

// tryLock opens path read-only and flocks it without blocking, creating it
// (O_EXCL, so created is exact) when missing. It probes read-only, which
// needs no write access: a failed probe's close must not look like a holder
// leaving to watchers (IN_CLOSE_WRITE).
func tryLock(path string) (f *os.File, created, ok bool, err error) {
	const flags = syscall.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_CLOEXEC
	// syscall.Open, not os.OpenFile: a losing probe is the hot path of
	// every cron start, and os.OpenFile also sets up non-blocking I/O.
	fd, err := syscall.Open(path, flags, 0)
	if err == syscall.ENOENT {
		fd, err = syscall.Open(path, flags|syscall.O_CREAT|syscall.O_EXCL, 0o640)
		created = err == nil
		if err == syscall.EEXIST { // another candidate created it first
			fd, err = syscall.Open(path, flags, 0)
		}
	}
	if err != nil {
		if err == syscall.ELOOP {
			return nil, false, false, fmt.Errorf("lock file %s is a symbolic link: refusing to follow it", path)
		}
		return nil, false, false, fmt.Errorf("lock %s: %w", path, &os.PathError{Op: "open", Path: path, Err: err})
	}
	for {
		err = syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	switch err {
	case nil:
		return os.NewFile(uintptr(fd), path), created, true, nil
	case syscall.EWOULDBLOCK:
		_ = syscall.Close(fd)
		return nil, created, false, nil
	}
	_ = syscall.Close(fd)
	return nil, false, false, fmt.Errorf("lock %s: %w", path, err)
}

// Records implements Set. A record whose process is gone reads as free,
// unless the kernel says the slot's lock file is flocked: then the slot reads
// as held by the flock's owner, with NoRecord set (its holder has not
// published yet, or cannot: a full disk, a deleted record), and with the
// Since and Deadline of its tenure in the lock file when it wrote one, so
// a frozen one is still healed. Reading /proc/locks takes no lock. A
// Guarded view does not ask the kernel: such a slot reads as free.
func (s *FileSet) Records() ([]Record, error) {
	out := make([]Record, s.n)
	var fl []flockEntry
	read := false
	for i := range out {
		r, ok := s.readRecord(i)
		if !ok && s.guard == nil {
			if !read {
				fl, _ = flocks()
				read = true
			}
			if pid, held := flockOwner(s.Path(i), fl); held {
				start, _ := proc.StartTime(pid)
				r = Record{Slot: i, Held: true, PID: pid, Start: start, Role: s.role, NoRecord: true}
				if t, ok := s.readTenure(i); ok && t.PID == pid && t.Start == start {
					r.Since, r.Deadline, r.BootDeadline = t.Since, t.Deadline, t.BootDeadline
				}
			}
		}
		out[i] = r
	}
	return out, nil
}

// readRecord returns slot i's record and whether it names a live holder.
func (s *FileSet) readRecord(i int) (Record, bool) {
	r, ok := s.parseRecord(i)
	if !ok || !r.Held || !proc.Alive(r.PID, r.Start) {
		return Record{Slot: i}, false
	}
	return r, true
}

// parseRecord reads slot i's record as written, whoever wrote it.
func (s *FileSet) parseRecord(i int) (Record, bool) {
	b, err := os.ReadFile(s.recordPath(i))
	if err != nil {
		return Record{}, false
	}
	var r Record
	if json.Unmarshal(b, &r) != nil {
		return Record{}, false
	}
	r.Slot = i
	return r, true
}

// held keeps every held lock file reachable: an *os.File closed by a
// finalizer would drop its lock.
var held sync.Map // *fileSlot → struct{}

func keep(sl *fileSlot)   { held.Store(sl, struct{}{}) }
func unkeep(sl *fileSlot) { held.Delete(sl) }

type fileSlot struct {
	set  *FileSet
	i    int
	prev *Record       // left by a holder that died holding the slot
	lost chan struct{} // closed by the watch goroutine
	stop chan struct{} // closed by Release
	wg   sync.WaitGroup
	once sync.Once

	// mu guards what follows. The watch goroutine swaps f, beacon and ino
	// when it restores an unlinked lock file; Publish and Release use them.
	mu     sync.Mutex
	f      *os.File // read-only, flocked
	beacon *os.File // write-only; closed after the lock is dropped
	ino    uint64   // f's inode
	rec    *Record  // the last record published, republished on restore
	tenure []byte   // the tenure last written in f (writeTenure), nil for none
}

var _ Slot = (*fileSlot)(nil)

func (sl *fileSlot) Index() int            { return sl.i }
func (sl *fileSlot) Name() string          { return sl.set.role + "-" + strconv.Itoa(sl.i) }
func (sl *fileSlot) Lost() <-chan struct{} { return sl.lost }
func (sl *fileSlot) Inherited() *Record    { return sl.prev }

// Fence implements Slot: a flock slot has no fence.
func (sl *fileSlot) Fence() (string, int64) { return "", 0 }

// LostReason implements Slot.
func (sl *fileSlot) LostReason() string {
	select {
	case <-sl.lost:
		return "lock file replaced by one another process holds"
	default:
		return ""
	}
}

// open opens the beacon, a writable descriptor of the locked file that is
// closed, after the lock is dropped, exactly when the holder releases or
// dies: its close is what Watch reports. It notes ino, the inode locked.
func (sl *fileSlot) open(ino uint64) error {
	beacon, err := os.OpenFile(sl.set.Path(sl.i), os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("lock %s: %w", sl.set.Path(sl.i), err)
	}
	sl.beacon, sl.ino, sl.tenure = beacon, ino, nil
	return nil
}

// Publish writes the record to a temporary file and renames it into place, so
// a reader sees the old record or the new one, never half of one. A record
// with a Deadline also writes the tenure in place in the lock file (see
// tenure.go), which needs no new space: when neither can be written (a
// full disk as the slot was won), the error wraps ErrDeadlineUnpublished.
func (sl *fileSlot) Publish(r Record) error {
	r.Slot, r.Held, r.NoRecord = sl.i, true, false
	if r.Role == "" {
		r.Role = sl.set.role
	}
	r.Queue, r.Target = sl.set.queue, sl.set.target
	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.rec = &r
	terr := sl.writeTenure(r)
	err := sl.write(r)
	if err != nil && terr != nil {
		return fmt.Errorf("%w: %w (and %w)", ErrDeadlineUnpublished, err, terr)
	}
	return err
}

// write puts r in place; sl.mu held.
func (sl *fileSlot) write(r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	// A temporary file created exclusively under a random name: a link
	// planted in the lock dir cannot make us write through it.
	if err := atomicfile.Write(sl.set.recordPath(sl.i), b, 0o644); err != nil {
		return fmt.Errorf("publish slot record: %w", err)
	}
	return nil
}

// Release takes the record away first, so nobody reads a freed slot as
// held: it renames it aside, and unlinks it once the lock is dropped.
// Unlinking a record replaced by rename took half a millisecond on ext4
// (the rename allocates its blocks, the unlink frees them), and the slot's
// next holder, waiting for the drop, would wait for that too.
func (sl *fileSlot) Release() error {
	var err error
	sl.once.Do(func() {
		close(sl.stop)
		sl.wg.Wait()
		sl.mu.Lock()
		defer sl.mu.Unlock()
		rec := sl.set.recordPath(sl.i)
		aside := filepath.Join(sl.set.dir, "."+filepath.Base(rec)+".gone") // one per slot: a kill -9 right here leaves one at most
		moved := os.Rename(rec, aside) == nil
		if !moved {
			if rerr := os.Remove(rec); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = rerr
			}
		}
		if uerr := sl.f.Close(); uerr != nil && err == nil {
			err = uerr
		}
		_ = sl.beacon.Close()
		unkeep(sl)
		if moved {
			_ = os.Remove(aside)
		}
	})
	return err
}

// watchStart starts a goroutine, owned by the slot and stopped by Release,
// that sees the lock file unlinked or replaced (inotify on the file and the
// dir, the inode checked every set.watch as a fallback) and restores it; it
// closes lost only when it cannot.
func (sl *fileSlot) watchStart() error {
	lockName, recName := filepath.Base(sl.set.Path(sl.i)), filepath.Base(sl.set.recordPath(sl.i))
	n, err := newNotifier(func(name string) bool { return name == "" || name == lockName || name == recName }, nil)
	if err != nil {
		n = nil // no inotify: the poll alone
	} else {
		sl.watchPaths(n)
	}
	sl.wg.Add(1)
	go func() {
		defer sl.wg.Done()
		var events <-chan struct{}
		if n != nil {
			// Closing an inotify fd can take milliseconds: not on
			// Release's path (a promotion releases a standby slot).
			defer func() { go n.close() }()
			events = n.c
		}
		t := time.NewTicker(sl.set.watch)
		defer t.Stop()
		for {
			select {
			case <-sl.stop:
				return
			case <-events:
			case <-t.C:
			}
			if now, err := inode(sl.set.Path(sl.i)); err == nil && now == sl.ino {
				sl.ensureRecord()
				continue
			}
			if !sl.restore() {
				select {
				case <-sl.stop: // released while restoring: not a loss
				default:
					close(sl.lost)
				}
				return
			}
			if n != nil {
				sl.watchPaths(n)
			}
		}
	}()
	return nil
}

// watchPaths asks n about the lock dir (the lock file or its record removed
// or renamed, the dir itself removed) and the held file (its link count
// changed, which unlink does while the file stays open).
func (sl *fileSlot) watchPaths(n *notifier) {
	_ = n.add(sl.set.dir, unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF)
	_ = n.add(sl.set.Path(sl.i), unix.IN_ATTRIB|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF)
}

// restoreFor is how long a holder whose lock file was unlinked tries to lock
// a new one before it gives the slot up: a candidate that created the new
// file holds it only while it checks for us, then lets go.
const restoreFor = 2 * time.Second

// restore recreates the lock dir and file and locks it in place of the
// unlinked one, keeping the old lock until the new one is held, so the slot
// is held throughout; then it republishes the record. It fails when another
// process holds the new file for restoreFor, or the stop channel closes.
func (sl *fileSlot) restore() bool {
	path := sl.set.Path(sl.i)
	for end := time.Now().Add(restoreFor); time.Now().Before(end); {
		if os.MkdirAll(sl.set.dir, 0o750) == nil {
			if f, _, ok, err := tryLock(path); ok && err == nil {
				if st, named := names(path, f); named {
					return sl.swap(f, st.Ino)
				}
				_ = f.Close() // replaced since the open: try again
			}
		}
		select {
		case <-sl.stop:
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	return false
}

// swap makes f, locked in place of the unlinked file, the slot's lock file
// (ino its inode), lets the old one go and republishes the record.
func (sl *fileSlot) swap(f *os.File, ino uint64) bool {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	oldF, oldBeacon := sl.f, sl.beacon
	sl.f = f
	if err := sl.open(ino); err != nil {
		sl.f = oldF
		_ = f.Close()
		return false
	}
	_ = oldBeacon.Close()
	_ = oldF.Close()
	if sl.rec != nil {
		_ = sl.writeTenure(*sl.rec)
		_ = sl.write(*sl.rec)
	}
	return true
}

// ensureRecord republishes the record when it was removed (a tmp cleaner)
// while the slot is held.
func (sl *fileSlot) ensureRecord() {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.rec == nil {
		return
	}
	if _, err := os.Lstat(sl.set.recordPath(sl.i)); errors.Is(err, os.ErrNotExist) {
		_ = sl.write(*sl.rec)
	}
}

func inode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}
