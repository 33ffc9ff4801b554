package work

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// ProgressNote is how far a running job says it is: a percentage, 0 to
// 100, and a short message.
type ProgressNote struct {
	Pct int    `json:"pct"`
	Msg string `json:"msg,omitempty"`
	// At is when the holder wrote it to Redis (ProgressOf); zero on the job.
	At time.Time `json:"at,omitzero"`
}

// String is "42% resizing".
func (n ProgressNote) String() string {
	if n.Msg == "" {
		return strconv.Itoa(n.Pct) + "%"
	}
	return strconv.Itoa(n.Pct) + "% " + n.Msg
}

// MaxProgressMsg bounds a progress message, in bytes; a longer one is cut
// (on a character boundary).
const MaxProgressMsg = 200

// progressEvery is how often at most a job's progress is written to Redis,
// whatever the job reports: the keeper writes the latest note of each job
// whose note changed, at most this often.
const progressEvery = 500 * time.Millisecond

// progressKeep is how long a progress note stays in Redis after the last
// write: a holder that dies leaves none for long.
const progressKeep = time.Minute

// ErrBadProgress is a progress percentage outside 0–100: nothing is
// recorded.
var ErrBadProgress = errors.New("progress must be 0 to 100")

// Progress reports how far the job ctx runs (a handler's context) is: pct
// from 0 to 100 and a short message (cut at MaxProgressMsg bytes). It only
// stores the note in memory and never blocks: the holder writes the
// latest note to Redis at most twice a second, where `baton job` and
// ProgressOf read it, and shows it in `baton status`. A pct outside 0–100
// returns ErrBadProgress and records nothing.
func Progress(ctx context.Context, pct int, msg string) error {
	j := jobOf(ctx)
	if j == nil {
		return ErrNoJob
	}
	return j.SetProgress(pct, msg)
}

// SetProgress is the package's Progress for a handler that has its Job.
func (j *Job) SetProgress(pct int, msg string) error {
	if pct < 0 || pct > 100 {
		return fmt.Errorf("%w, not %d", ErrBadProgress, pct)
	}
	if len(msg) > MaxProgressMsg {
		cut := MaxProgressMsg
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut]
	}
	j.note.Store(&ProgressNote{Pct: pct, Msg: msg})
	if j.noted != nil {
		j.noted.Store(true)
	}
	return nil
}

// ProgressNow is the job's latest progress, false when it reported none.
func (j *Job) ProgressNow() (ProgressNote, bool) {
	if p := j.note.Load(); p != nil {
		return *p, true
	}
	return ProgressNote{}, false
}

// progressLine parses an exec job's progress line, "PCT MESSAGE" (the
// message optional): e.g. "42 resizing".
func progressLine(line []byte) (int, string, error) {
	line = bytes.TrimRight(line, "\r")
	num, msg, _ := bytes.Cut(line, []byte(" "))
	pct, err := strconv.Atoi(string(num))
	if err != nil {
		return 0, "", fmt.Errorf("progress line %q: want PCT MESSAGE, e.g. \"42 resizing\"", clip(line))
	}
	if pct < 0 || pct > 100 {
		return 0, "", fmt.Errorf("progress line %q: %w", clip(line), ErrBadProgress)
	}
	return pct, string(bytes.TrimSpace(msg)), nil
}

// progressShown is a note the keeper wrote for a job.
type progressShown struct {
	note *ProgressNote
	at   time.Time
}

// writeProgress writes the progress of running jobs whose note changed
// and was last written at least progressEvery ago, and takes out those of
// jobs no longer running; the keeper's, each round, and only when a note
// changed or some are shown (a queue whose jobs report no progress costs
// nothing).
func (r *runner) writeProgress(ctx context.Context) {
	if !r.noted.Swap(false) && len(r.shown) == 0 {
		return
	}
	now := time.Now()
	var set []any
	var later bool
	running := map[string]bool{}
	r.mu.Lock()
	for _, j := range r.active {
		running[j.ID] = true
		n := j.note.Load()
		if n == nil {
			continue
		}
		was := r.shown[j.ID]
		switch {
		case was.note == n:
		case now.Sub(was.at) < progressEvery:
			later = true // written moments ago: the next round writes it
		default:
			b, _ := json.Marshal(ProgressNote{Pct: n.Pct, Msg: n.Msg, At: now.Truncate(time.Millisecond)})
			set = append(set, j.ID, b)
			if r.shown == nil {
				r.shown = map[string]progressShown{}
			}
			r.shown[j.ID] = progressShown{note: n, at: now}
		}
	}
	r.mu.Unlock()
	if later {
		r.noted.Store(true)
	}
	var gone []string
	for id := range r.shown {
		if !running[id] {
			gone = append(gone, id)
			delete(r.shown, id)
		}
	}
	if len(set) == 0 && len(gone) == 0 {
		return
	}
	_, err := r.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		if len(set) > 0 {
			p.HSet(ctx, r.keys.Progress, set...)
			p.PExpire(ctx, r.keys.Progress, progressKeep)
		}
		if len(gone) > 0 {
			p.HDel(ctx, r.keys.Progress, gone...)
		}
		return nil
	})
	if err != nil {
		r.c.Logger.Debug().Err(err).Msg("write jobs' progress")
	}
}

// ProgressOf is the progress that running job id of queue q last reported
// (written by its holder at most twice a second), false when none.
func ProgressOf(ctx context.Context, rdb redis.Cmdable, q, id string) (ProgressNote, bool, error) {
	var n ProgressNote
	b, err := rdb.HGet(ctx, KeysFor(q).Progress, id).Bytes()
	switch {
	case isRedisNil(err):
		return n, false, nil
	case err != nil:
		return n, false, fmt.Errorf("progress of job %s: %w", id, err)
	}
	if err := json.Unmarshal(b, &n); err != nil {
		return n, false, fmt.Errorf("progress of job %s: %w", id, err)
	}
	return n, true, nil
}
