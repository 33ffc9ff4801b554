// Package lock provides slot sets: N numbered permits of which a process may
// hold one. baton uses one set for run slots and another for standby slots.
//
// Most callers need NewFileSet and Set.TryAcquire:
//
//	run, _ := lock.NewFileSet("/run/baton", "thumbs", lock.RoleRun, 4)
//	slot, ok, err := run.TryAcquire()
//
// Guarantees: at most N processes hold slots of one set at any instant, under
// any interleaving and kill -9 (the kernel drops a dead process's flock). A
// holder publishes a Record that others read without touching the lock; a
// record whose process is gone, or whose pid was reused, reads as free.
//
// The flock backend is for one machine and a local disk: flock over NFS or
// CIFS is emulated and unsafe.
package lock

import (
	"errors"
	"time"
)

// Roles of a slot set; they name its files.
const (
	RoleRun     = "run"
	RoleStandby = "standby"
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
	// Lost is closed if the slot is lost while held (lock file replaced).
	Lost() <-chan struct{}
	// Inherited is the record of a previous holder that died holding the
	// slot (a clean release removes it), or nil.
	Inherited() *Record
	// Release clears the record and frees the slot. Safe to call twice.
	Release() error
}

// Record describes a slot's holder. The zero value (Held false) is a free slot.
type Record struct {
	Slot  int    `json:"slot"`
	Held  bool   `json:"held"`
	PID   int    `json:"pid,omitempty"`
	Start uint64 `json:"start_ticks,omitempty"` // process start, clock ticks since boot
	Host  string `json:"host,omitempty"`
	Role  string `json:"role,omitempty"`
	// Since is when the holder took the slot; Until its planned end.
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// Deadline is the holder's hard deadline (Until + shutdown grace +
	// margin): past it, and past a further margin, the holder is overdue
	// (frozen, stopped, stuck in the kernel) and may be killed by whoever
	// sees it. Zero for standbys and for holders that set none.
	Deadline time.Time `json:"deadline,omitzero"`
	// Token is random, unique to this holder's tenure of this slot of this
	// lock dir; its jobs carry it in their environment (BATON_HOLDER), so
	// what a dead holder left running can be told apart from the jobs of
	// another deployment that uses the same queue name.
	Token string `json:"token,omitempty"`
	// JobsDone counts jobs finished by this holder.
	JobsDone int64 `json:"jobs_done"`
	// Job is the id of a job in progress, JobSince when it started.
	Job      string    `json:"job,omitempty"`
	JobSince time.Time `json:"job_since,omitzero"`
}
