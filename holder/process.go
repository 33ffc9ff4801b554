package holder

import (
	"time"

	"github.com/baton-run/baton/internal/proc"
	"github.com/baton-run/baton/lock"
)

// killAll kills, for a forced exit, the running jobs or children and, when
// the holder owns its process, every process they started, daemons
// included, waiting up to half a second for the killed to let go of their
// children (proc.KillDescendants): a daemon reparented only after the
// holder exits would live on under init.
func (h *Holder) killAll() {
	h.mu.Lock()
	kids := h.kids
	h.mu.Unlock()
	if kids == nil {
		return
	}
	kids.KillAll()
	if !h.o.OwnsProcess {
		return
	}
	if n := proc.KillDescendants(500 * time.Millisecond); n > 0 {
		h.log.Info().Int("processes", n).Msg("killed the jobs' processes")
	}
}

// adopt makes the holder a child subreaper, so that what its jobs leave
// running (a daemon, a double fork) is reparented to it, not to init: the
// exec handler kills a job's orphans when the job ends, and killOrphans the
// rest when the holder leaves. Exec and persistent modes only: a Go
// handler's own children are waited for by code that does not register
// them (proc.Start).
func (h *Holder) adopt() {
	if err := proc.BecomeSubreaper(); err != nil {
		h.log.Warn().Err(err).Msg("cannot become a child subreaper: processes that jobs daemonize may outlive them")
	}
}

// killOrphans kills everything adopted from this holder's jobs: every child
// it did not start itself, with its process tree, whatever its environment
// (spawned candidates are started through proc.Start and are left alone).
func (h *Holder) killOrphans() {
	if !proc.Subreaper() {
		return
	}
	if n := proc.KillOrphans(func([]byte) bool { return true }); n > 0 {
		h.log.Info().Int("processes", n).Msg("killed processes that jobs left running")
	}
}

// killLeftovers kills what the slot's previous holder, dead holding the
// slot, left running: its jobs' processes carry its token, and nothing else
// does.
func (h *Holder) killLeftovers(prev *lock.Record) {
	holders := lock.FlockHolders() // a holder a job started is not a leftover
	if n := proc.KillHolderLeftovers(prev.Token, func(pid int) bool { return holders[pid] }); n > 0 {
		h.log.Warn().Int("processes", n).Int("previous_pid", prev.PID).Msg("killed processes left running by this slot's previous holder")
	}
}
