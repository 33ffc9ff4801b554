package web

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/baton-run/baton/work"
)

// maxReason bounds a pause's or a cancel's reason from a form, in bytes.
const maxReason = 500

// pause pauses a queue (POST queue, for, reason, token): as baton pause,
// its holders start no job within a second; for (a Go duration, e.g. 15m)
// ends it by itself on Redis' clock, empty lasts until resumed.
func (s *server) pause(w http.ResponseWriter, r *http.Request) {
	ctx, q, ok := s.allowed(w, r, "pause")
	if !ok {
		return
	}
	var d time.Duration
	if f := strings.TrimSpace(r.PostFormValue("for")); f != "" {
		var err error
		if d, err = time.ParseDuration(f); err != nil || d <= 0 {
			s.refuse(w, r, "pause", q, fmt.Errorf("pause: for %q is not a positive duration (give e.g. 15m, or nothing to pause until resumed)", f))
			return
		}
	}
	reason, err := formReason(r)
	if err != nil {
		s.refuse(w, r, "pause", q, fmt.Errorf("pause: %w", err))
		return
	}
	p := work.Pause{User: webUser(r), Host: hostname(), Reason: reason}
	if err := work.PauseQueue(ctx, s.o.Redis, q, p, d); err != nil {
		s.actionFailed(w, r, "pause", q, 0, err)
		return
	}
	s.o.Log.Info().Str("action", "pause").Str("queue", q).Dur("for", d).Str("reason", reason).Str("remote", r.RemoteAddr).Msg("web: paused the queue")
	s.controlRedirect(w, r, "/", url.Values{"queue": {q}, "done": {"paused"}}, "jobs")
}

// resume ends a queue's pause (POST queue, token).
func (s *server) resume(w http.ResponseWriter, r *http.Request) {
	ctx, q, ok := s.allowed(w, r, "resume")
	if !ok {
		return
	}
	was, err := work.Resume(ctx, s.o.Redis, q)
	if err != nil {
		s.actionFailed(w, r, "resume", q, 0, err)
		return
	}
	done := "resumed"
	if !was {
		done = "not-paused"
	}
	s.o.Log.Info().Str("action", "resume").Str("queue", q).Bool("was_paused", was).Str("remote", r.RemoteAddr).Msg("web: resumed the queue")
	s.controlRedirect(w, r, "/", url.Values{"queue": {q}, "done": {done}}, "jobs")
}

// cancel cancels one job by id (POST queue, id, reason, token), as baton
// cancel does but without waiting: a waiting, scheduled or retrying job is
// dead-lettered as cancelled at once; for a running one the request is
// written and its holder stops it within a second. A job that is done,
// dead or unknown is left alone: 409, saying what it is.
func (s *server) cancel(w http.ResponseWriter, r *http.Request) {
	ctx, q, ok := s.allowed(w, r, "cancel")
	if !ok {
		return
	}
	ids := r.PostForm["id"]
	if len(ids) != 1 || !work.IsJobID(strings.TrimSpace(ids[0])) {
		s.refuse(w, r, "cancel", q, fmt.Errorf("cancel: give one job id, like 1700000000000-0 (got %d: %q)", len(ids), strings.Join(ids, " ")))
		return
	}
	id := strings.TrimSpace(ids[0])
	reason, err := formReason(r)
	if err != nil {
		s.refuse(w, r, "cancel", q, fmt.Errorf("cancel: %w", err))
		return
	}
	why := "cancelled by " + webUser(r) + "@" + hostname()
	if reason != "" {
		why += ": " + reason
	}
	res, err := work.CancelWith(ctx, s.o.Redis, q, work.CancelOptions{Reason: why, DeadMax: s.o.Config.DeadMax}, id)
	if err != nil {
		s.actionFailed(w, r, "cancel", q, 0, err)
		return
	}
	c := res[0]
	s.o.Log.Info().Str("action", "cancel").Str("queue", q).Str("job", id).Str("state", c.State).Str("outcome", c.Outcome).
		Str("reason", reason).Str("remote", r.RemoteAddr).Msg("web: cancel")
	if c.Outcome == work.CancelNothing {
		what := "it is " + c.State
		if c.State == work.StateUnknown {
			what = "unknown on queue " + q + " (done and not kept, or never enqueued here)"
		}
		s.fail(w, http.StatusConflict, fmt.Errorf("job %s not cancelled: %s", id, what))
		return
	}
	s.controlRedirect(w, r, "/job", url.Values{"queue": {q}, "id": {id}, "done": {c.Outcome}}, "")
}

// refuse answers a bad action form: 400, logged.
func (s *server) refuse(w http.ResponseWriter, r *http.Request, name, q string, err error) {
	s.o.Log.Warn().Str("action", name).Str("queue", q).Str("remote", r.RemoteAddr).Str("reason", err.Error()).Msg("web: refused an action: bad form")
	s.fail(w, http.StatusBadRequest, err)
}

// controlRedirect sends the browser to path?v#anchor after an action
// (POST, then GET: a reload does not repeat it).
func (s *server) controlRedirect(w http.ResponseWriter, r *http.Request, path string, v url.Values, anchor string) {
	u := path + "?" + v.Encode()
	if anchor != "" {
		u += "#" + anchor
	}
	http.Redirect(w, r, u, http.StatusSeeOther)
}

// controlDone is the banner after a control action (?done=paused), from
// known words only, never from the query's text.
func controlDone(r *http.Request) string {
	switch r.FormValue("done") {
	case "paused":
		return "queue paused: its holders start no job within a second; running jobs finish"
	case "resumed":
		return "queue resumed: its holders start jobs again within a second"
	case "not-paused":
		return "the queue was not paused"
	case work.CancelDone:
		return "job cancelled: dead-lettered with reason cancelled (requeue it to run it again)"
	case work.CancelRequested:
		return "cancel requested: the holder running the job stops it within a second and dead-letters it as cancelled"
	}
	return ""
}

// formReason is the form's reason, trimmed and bounded, control
// characters refused (it is shown by status and kept in dead letters).
func formReason(r *http.Request) (string, error) {
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if len(reason) > maxReason {
		return "", fmt.Errorf("the reason is %d bytes, at most %d", len(reason), maxReason)
	}
	if strings.ContainsFunc(reason, func(c rune) bool { return c < ' ' || c == 0x7f }) {
		return "", fmt.Errorf("the reason holds control characters")
	}
	return reason, nil
}

// webUser names who acted from the dashboard: web, and the address the
// request came from (the token says nothing about who holds it).
func webUser(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "web(" + host + ")"
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "?"
	}
	return h
}
