// Package lock provides slot sets: N numbered permits of which a process may
// hold one. baton uses one set for run slots and another for standby slots.
//
// Most callers need NewFileSet and Set.TryAcquire:
//
//	run, _ := lock.NewFileSet("/run/baton", "thumbs", lock.RoleRun, 4)
//	slot, ok, err := run.TryAcquire()
//
// Guarantees: at most N processes hold slots of one set at any instant, under
// any interleaving and kill -9 (the kernel drops a dead process's flock),
// and when lock files or the lock dir are deleted under their holders (a
// holder restores its file; a newcomer defers to a holder of the unlinked
// one). A holder publishes a Record that others read without touching the
// lock; a record whose process is gone, or whose pid was reused, reads as
// free unless the kernel lists the slot's lock file as flocked.
//
// The flock backend is for one machine and a local disk: flock over NFS or
// CIFS is emulated and unsafe.
//
// LeaseSet (NewLeaseSet) is the fleet backend: slots are Redis leases shared
// by every host of a queue, with expiry judged on Redis' clock, a fencing
// token per grant (Fencer) and a renew deadline after which a holder's slot
// closes Lost before its lease can expire. A run LeaseSet paired with its
// standby set (HandOverTo) is a Handover: a release grants the lease to the
// standby first in the fleet's line in the same script (docs/fleet.md).
package lock

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Roles of a slot set; they name its files.
const (
	RoleRun     = "run"
	RoleStandby = "standby"
	// RoleHost is a file set that caps the slots of any role one machine
	// takes from a shared backend (max_per_host): checked before Redis.
	RoleHost = "host"
)

// ErrUnsafeDir marks a lock directory others could tamper with.
var ErrUnsafeDir = errors.New("unsafe lock directory")

// Set is N slots of which each process may hold one.
type Set interface {
	// TryAcquire takes a free slot without blocking: (slot, true, nil) when
	// won, (nil, false, nil) when every slot is held, (nil, false, err) when
	// something broke.
	TryAcquire() (Slot, bool, error)
	// Size is N.
	Size() int
	// Records reads every slot's holder record, index order, without locking.
	Records() ([]Record, error)
	// Lowest is the set of the k lowest-numbered slots, k in [1, Size()]
	// (the function Lowest checks it).
	Lowest(k int) (Set, error)
	// Capabilities are what the backend can do beyond this interface.
	Capabilities() Capabilities
}

// Capabilities are a Set's optional powers, as its backend reports them: a
// caller asks for one here and never discovers it by a type assertion, so
// a third backend says what it can do by filling this in. A nil field is a
// power the backend does not have.
type Capabilities struct {
	// Pair tries a run slot or a standby slot in one call (leases).
	Pair Pair
	// Handover puts standbys in a line and hands them run slots (leases);
	// without it they poll, and Watcher and Guarded help them.
	Handover Handover
	// Evicter heals holders proven overdue (flock files; leases expire).
	Evicter Evicter
	// Watcher wakes a waiter when a slot may have freed (inotify).
	Watcher Watcher
	// Guarded is a cheap view of the set for a waiting standby.
	Guarded Guarded
	// Shared: the set's slots may be shared with another deployment (a
	// lock dir); Foreign names a live holder of another one.
	Shared Shared
	// Fleet reads what only a fleet's leases have: the grant pause after a
	// Redis restart, the line of standbys.
	Fleet Fleet
	// Remote: Records is a network call, to make sparingly.
	Remote bool
}

// Shared is a Set whose slots another deployment may take (FileSet.Foreign).
type Shared interface {
	Foreign() (Record, bool)
}

// Fleet is what status reads of a fleet's leases (LeaseSet.PausedFor, Line).
type Fleet interface {
	PausedFor() (time.Duration, error)
	Line() (line []InLine, stale int, err error)
}

// Lowest is the set of s's k lowest-numbered slots: the same slots (the
// same files, the same leases), so a holder of slot i in one is the holder
// of slot i in the other. With min_slots < slots, cron's candidates and the
// standbys take only these, and scale-up candidates the rest. k must be in
// [1, s.Size()].
func Lowest(s Set, k int) (Set, error) {
	if k < 1 || k > s.Size() {
		return nil, fmt.Errorf("lock: %d lowest of %d slots", k, s.Size())
	}
	return s.Lowest(k)
}

// Slot is one held permit.
type Slot interface {
	// Index is the slot number in [0, N).
	Index() int
	// Name identifies the slot across processes, e.g. "run-3"; with the host
	// it is the Redis consumer name.
	Name() string
	// Publish replaces the holder record that Records shows.
	Publish(Record) error
	// Lost is closed if the slot is lost while held: its lock file was
	// unlinked or replaced and could not be restored.
	Lost() <-chan struct{}
	// LostReason says why Lost closed ("" while held).
	LostReason() string
	// Fence is the slot's lease key and the fencing token of this tenure
	// (Fencer); "" and 0 for a slot without fencing (a flock file).
	Fence() (key string, token int64)
	// Inherited is the record of a previous holder that died holding the
	// slot (a clean release removes it), or nil.
	Inherited() *Record
	// Release clears the record and frees the slot. Safe to call twice.
	Release() error
}

// Evicter is a Set that can remove a holder proven overdue: frozen
// (SIGSTOP, a paused VM), stuck in the kernel (D state), or otherwise past
// the hard deadline it published.
type Evicter interface {
	// Overdue returns the records of holders past their Deadline + margin
	// at now: candidates for Evict. It reads the records only (no /proc,
	// no lock), so a candidate that lost every slot can afford it.
	Overdue(now time.Time, margin time.Duration) []Record
	// Evict kills r's process and its descendants when it can prove them
	// to be slot r.Slot's overdue holder: r is still that slot's record in
	// this set, the pid still has r's start time and holds the slot's lock
	// file, and now is past r.Deadline + margin. It returns how many
	// processes it killed (0: nothing proven, nothing done), once r's
	// process has dropped its locks and died, or after a second.
	Evict(r Record, now time.Time, margin time.Duration) (int, error)
}

// Overdue reports whether r is a holder past its published hard deadline
// plus margin. A record without a deadline is never overdue (a NoRecord
// one has the deadline of its tenure in the lock file, when it wrote one).
func (r Record) Overdue(now time.Time, margin time.Duration) bool {
	return r.Held && !r.Deadline.IsZero() && now.After(r.Deadline.Add(margin))
}

// Record describes a slot's holder. The zero value (Held false) is a free slot.
type Record struct {
	Slot  int    `json:"slot"`
	Held  bool   `json:"held"`
	PID   int    `json:"pid,omitempty"`
	Start uint64 `json:"start_ticks,omitempty"` // process start, clock ticks since boot
	Host  string `json:"host,omitempty"`
	Role  string `json:"role,omitempty"`
	// Queue and Target name what the slot is for: the queue, and the Redis
	// server and database its jobs live in (config's RedisTarget, never
	// credentials). Two deployments that share a lock dir and a queue name
	// on two databases would share its lock files: Target tells them apart
	// (FileSet.Foreign). Empty in records of older versions.
	Queue  string `json:"queue,omitempty"`
	Target string `json:"target,omitempty"`
	// Since is when the holder took the slot; Until its planned end.
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// Deadline is the holder's hard deadline (Until + shutdown grace +
	// margin): past it, and past a further margin, the holder is overdue
	// (frozen, stopped, stuck in the kernel) and may be killed by whoever
	// sees it. Zero for standbys and for holders that set none.
	Deadline time.Time `json:"deadline,omitzero"`
	// BootDeadline is the same deadline on the host's boot clock
	// (CLOCK_BOOTTIME, which counts suspend and never steps): eviction
	// needs both clocks past it, so a wall clock stepped forward never gets
	// a healthy holder killed. Zero in records of older versions.
	BootDeadline time.Duration `json:"boot_deadline_ns,omitempty"`
	// Token is random, unique to this holder's tenure of this slot of this
	// lock dir; its jobs carry it in their environment (BATON_HOLDER), so
	// what a dead holder left running can be told apart from the jobs of
	// another deployment that uses the same queue name.
	Token string `json:"token,omitempty"`
	// NoRecord is set by Records, never published: the slot's lock file is
	// flocked (by PID, per /proc/locks) but its record is missing, stale or
	// unreadable: a holder that has not published yet, or cannot (a full
	// disk, a record removed under it). Since, Deadline and BootDeadline
	// are then the tenure the holder wrote in its lock file, if any.
	NoRecord bool `json:"no_record,omitempty"`
	// Fence is the fencing token of a lease (the Redis backend): it only
	// grows, so a write checked against it tells a current holder from a
	// stale one. Set by Records, from the lease.
	Fence int64 `json:"fence,omitempty"`
	// ExpiresIn is how long a lease has left on Redis' clock when Records
	// read it. Set by Records, never published.
	ExpiresIn time.Duration `json:"expires_in,omitempty"`

	// Activity is what the holder is doing (jobs done, the job in
	// progress, draining, a persistent holder's children), written and
	// read by the holder's package (holder.Activity): a JSON object whose
	// keys sit at the record's top level, beside lock's own. lock only
	// carries it, so what a holder does can grow without touching lock.
	Activity json.RawMessage `json:"-"`
}

// recordJSON is Record without its JSON methods.
type recordJSON Record

// recordKeys are the JSON keys of Record's own fields.
var recordKeys = func() []string {
	var keys []string
	t := reflect.TypeOf(recordJSON{})
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			keys = append(keys, name)
		}
	}
	return keys
}()

// MarshalJSON writes r's fields and, at the same level, Activity's keys.
func (r Record) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(recordJSON(r))
	if err != nil || len(r.Activity) == 0 {
		return b, err
	}
	a := bytes.TrimSpace(r.Activity)
	if len(a) < 2 || a[0] != '{' || a[len(a)-1] != '}' {
		return nil, fmt.Errorf("lock: a record's activity is not a JSON object: %.40q", a)
	}
	inner := bytes.TrimSpace(a[1 : len(a)-1])
	if len(inner) == 0 {
		return b, nil
	}
	out := make([]byte, 0, len(b)+len(inner)+1)
	out = append(append(out, b[:len(b)-1]...), ',')
	return append(append(out, inner...), '}'), nil
}

// UnmarshalJSON reads r's fields, and every other key into Activity.
func (r *Record) UnmarshalJSON(b []byte) error {
	var base recordJSON
	if err := json.Unmarshal(b, &base); err != nil {
		return err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	for _, k := range recordKeys {
		delete(all, k)
	}
	*r = Record(base)
	r.Activity = nil
	if len(all) > 0 {
		a, err := json.Marshal(all)
		if err != nil {
			return err
		}
		r.Activity = a
	}
	return nil
}
