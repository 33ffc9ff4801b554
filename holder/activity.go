package holder

import (
	"encoding/json"
	"time"

	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/work"
)

// Activity is what a holder is doing, as its slot record shows it
// (lock.Record.Activity: its keys sit beside lock's in the record's JSON).
// The publisher writes it every half second; status, job and the scaler
// read it.
type Activity struct {
	// JobsDone counts jobs finished by this holder.
	JobsDone int64 `json:"jobs_done"`
	// Job is the id of a job in progress, JobSince when it started.
	Job      string    `json:"job,omitempty"`
	JobSince time.Time `json:"job_since,omitzero"`
	// Progress is what that job last reported of its progress (Go
	// work.Progress, a persistent child's progress frame, an exec job's
	// BATON_PROGRESS_FD), nil when nothing.
	Progress *work.ProgressNote `json:"progress,omitempty"`
	// Draining is set once the holder stops taking jobs (its lifetime is
	// over, or it was told to stop): it no longer scales up.
	Draining bool `json:"draining,omitempty"`
	// Children are a persistent holder's worker processes, one per lane
	// that has one running (docs/workers.md); empty in other modes.
	Children []Child `json:"children,omitempty"`
}

// Child is one persistent worker process of a holder, as its record shows it.
type Child struct {
	PID  int   `json:"pid"`
	Jobs int64 `json:"jobs"`      // jobs it has served
	RSS  int64 `json:"rss_bytes"` // its resident memory when the record was written
}

// ActivityOf is r's activity; zero when r has none (a free slot, a
// standby) or it cannot be read.
func ActivityOf(r lock.Record) Activity {
	var a Activity
	if len(r.Activity) > 0 {
		_ = json.Unmarshal(r.Activity, &a)
	}
	return a
}

// Put sets r's activity to a.
func (a Activity) Put(r *lock.Record) {
	b, err := json.Marshal(a)
	if err == nil {
		r.Activity = b
	}
}
