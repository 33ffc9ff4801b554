package holder

import (
	"time"

	"github.com/baton-run/baton/internal/config"
)

// grace is shutdown_grace for the job loop and the handlers, whose zero
// means their default (30 s, 10 s): a configured 0 is no grace at all (a
// cancelled or timed-out job's group gets SIGKILL right after SIGTERM;
// in-flight jobs are stopped when the lifetime ends), so it is passed on
// as the shortest grace there is.
func grace(cfg *config.Config) time.Duration {
	if d := cfg.ShutdownGrace.D(); d > 0 {
		return d
	}
	return time.Nanosecond
}
