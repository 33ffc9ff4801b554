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

	"github.com/baton-run/baton/internal/proc"
	"github.com/gofrs/flock"
)

// FileSet is a Set of flock'd files <dir>/<queue>.<role>.<i>; each holder's
// record is <dir>/<queue>.<role>.<i>.json, replaced atomically by rename.
// Lock files are created when missing and never unlinked: unlink and re-create
// would let two processes hold one slot on two inodes.
type FileSet struct {
	dir, queue, role string
	n                int
	watch            time.Duration // how often a holder checks its lock file
}

var _ Set = (*FileSet)(nil)

// NewFileSet describes a set; it touches nothing on disk.
func NewFileSet(dir, queue, role string, n int) (*FileSet, error) {
	if role != RoleRun && role != RoleStandby {
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

// Size implements Set.
func (s *FileSet) Size() int { return s.n }

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
func (s *FileSet) TryAcquire() (Slot, bool, error) {
	if err := os.MkdirAll(s.dir, 0o750); err != nil {
		return nil, false, fmt.Errorf("create lock dir: %w", err)
	}
	first := rand.IntN(s.n)
	for k := 0; k < s.n; k++ {
		i := (first + k) % s.n
		path := s.Path(i)
		// Probe read-only (flock needs no write access): a failed probe's close
		// must not look like a holder leaving to watchers (IN_CLOSE_WRITE).
		fl := flock.New(path,
			flock.SetFlag(os.O_CREATE|os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC),
			flock.SetPermissions(0o640))
		ok, err := fl.TryLock()
		if err != nil {
			_ = fl.Close()
			if errors.Is(err, syscall.ELOOP) {
				return nil, false, fmt.Errorf("lock file %s is a symbolic link: refusing to follow it", path)
			}
			return nil, false, fmt.Errorf("lock %s: %w", path, err)
		}
		if !ok {
			_ = fl.Close()
			continue
		}
		// The beacon: a writable descriptor that is closed, after the lock is
		// dropped, exactly when the holder releases or dies. Its close is
		// what Watch reports.
		beacon, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err != nil {
			_ = fl.Close()
			return nil, false, fmt.Errorf("lock %s: %w", path, err)
		}
		sl := &fileSlot{set: s, i: i, fl: fl, beacon: beacon, lost: make(chan struct{}), stop: make(chan struct{})}
		if b, err := os.ReadFile(s.recordPath(i)); err == nil {
			var prev Record
			if json.Unmarshal(b, &prev) == nil {
				sl.prev = &prev
			}
		}
		if err := sl.watchStart(); err != nil {
			_ = fl.Close()
			_ = beacon.Close()
			return nil, false, err
		}
		keep(sl)
		return sl, true, nil
	}
	return nil, false, nil
}

// Records implements Set. A record whose process is gone reads as free.
func (s *FileSet) Records() ([]Record, error) {
	out := make([]Record, s.n)
	for i := range out {
		r, err := s.readRecord(i)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

func (s *FileSet) readRecord(i int) (Record, error) {
	free := Record{Slot: i}
	b, err := os.ReadFile(s.recordPath(i))
	if errors.Is(err, os.ErrNotExist) {
		return free, nil
	}
	if err != nil {
		return free, fmt.Errorf("read slot record: %w", err)
	}
	var r Record
	if json.Unmarshal(b, &r) != nil || !r.Held || !proc.Alive(r.PID, r.Start) {
		return free, nil
	}
	r.Slot = i
	return r, nil
}

// held keeps every held flock reachable: a *flock.Flock closed by a finalizer
// would drop its lock.
var held sync.Map // *fileSlot → struct{}

func keep(sl *fileSlot)   { held.Store(sl, struct{}{}) }
func unkeep(sl *fileSlot) { held.Delete(sl) }

type fileSlot struct {
	set    *FileSet
	i      int
	fl     *flock.Flock
	beacon *os.File // write-only; closed after the lock is dropped
	prev   *Record  // left by a holder that died holding the slot
	ino    uint64
	lost   chan struct{} // closed by the watch goroutine
	stop   chan struct{} // closed by Release
	wg     sync.WaitGroup
	once   sync.Once
}

var _ Slot = (*fileSlot)(nil)

func (sl *fileSlot) Index() int            { return sl.i }
func (sl *fileSlot) Name() string          { return sl.set.role + "-" + strconv.Itoa(sl.i) }
func (sl *fileSlot) Lost() <-chan struct{} { return sl.lost }
func (sl *fileSlot) Inherited() *Record    { return sl.prev }

// Publish writes the record to a temporary file and renames it into place, so
// a reader sees the old record or the new one, never half of one.
func (sl *fileSlot) Publish(r Record) error {
	r.Slot, r.Held = sl.i, true
	if r.Role == "" {
		r.Role = sl.set.role
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	final := sl.set.recordPath(sl.i)
	tmp := filepath.Join(sl.set.dir, "."+filepath.Base(final)+"."+strconv.Itoa(os.Getpid())+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("publish slot record: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("publish slot record: %w", err)
	}
	return nil
}

// Release removes the record first, so nobody reads a freed slot as held.
func (sl *fileSlot) Release() error {
	var err error
	sl.once.Do(func() {
		close(sl.stop)
		sl.wg.Wait()
		if rerr := os.Remove(sl.set.recordPath(sl.i)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = rerr
		}
		if uerr := sl.fl.Close(); uerr != nil && err == nil {
			err = uerr
		}
		_ = sl.beacon.Close()
		unkeep(sl)
	})
	return err
}

// watchStart notes the inode locked and starts a goroutine, owned by the
// slot and stopped by Release, that closes lost if the path stops naming it.
func (sl *fileSlot) watchStart() error {
	ino, err := inode(sl.set.Path(sl.i))
	if err != nil {
		return err
	}
	sl.ino = ino
	sl.wg.Add(1)
	go func() {
		defer sl.wg.Done()
		t := time.NewTicker(sl.set.watch)
		defer t.Stop()
		for {
			select {
			case <-sl.stop:
				return
			case <-t.C:
				if now, err := inode(sl.set.Path(sl.i)); err != nil || now != sl.ino {
					close(sl.lost)
					return
				}
			}
		}
	}()
	return nil
}

func inode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}
