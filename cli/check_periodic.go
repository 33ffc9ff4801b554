package cli

import (
	"fmt"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/periodic"
	"github.com/baton-run/baton/standby"
)

// checkPeriodic warns, per [[periodic]] entry with overlap = "allow", when a
// tick's job may still run as the next tick's starts: its timeout (the
// entry's, else job_timeout; 0 is none) is not below the schedule's
// shortest gap between ticks (over the next 1000). The entries themselves
// were validated by Load.
func checkPeriodic(cfg *config.Config) []standby.Relation {
	entries, err := cfg.PeriodicEntries()
	if err != nil {
		return nil
	}
	var rs []standby.Relation
	for _, e := range entries {
		if e.Overlap != periodic.OverlapAllow {
			continue // skip: never two at once
		}
		s, err := periodic.ParseSchedule(e.Schedule)
		if err != nil {
			continue
		}
		timeout := e.Timeout
		if timeout == 0 {
			timeout = cfg.JobTimeout.D()
		}
		gap := s.MinGap(time.Now(), 1000)
		r := standby.Relation{Name: "periodic-" + e.Name, Formula: "job timeout < shortest gap between ticks", Status: standby.Pass,
			Why: "with overlap = \"allow\" a tick's job is enqueued whatever the previous one's is doing: two may run at once"}
		fmtTimeout := standby.FormatDuration(timeout)
		if timeout == 0 {
			fmtTimeout = "none"
		}
		r.Values = fmt.Sprintf("%s < %s", fmtTimeout, standby.FormatDuration(gap))
		switch {
		case gap == 0:
			r.Margin = "-"
		case timeout == 0 || timeout >= gap:
			r.Status, r.Margin = standby.Warn, "-"
			r.Fix = fmt.Sprintf("set timeout below %s in periodic entry %q, or make its job safe to overlap (BATON_TICK tells the runs apart)", standby.FormatDuration(gap), e.Name)
		default:
			r.Margin = standby.FormatDuration(gap - timeout)
		}
		rs = append(rs, r)
	}
	return rs
}
