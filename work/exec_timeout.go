//go:build linux

package work

// ownsTimeouts: Exec enforces job timeouts itself (SIGTERM to the job's
// process group, SIGKILL after Grace), so work.Run does not cancel its
// context at the timeout.
func (x *Exec) ownsTimeouts() {}

var _ ownsTimeouts = (*Exec)(nil)
