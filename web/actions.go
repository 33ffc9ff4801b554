package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/baton-run/baton/work"
)

// maxActionIDs bounds the ids one action names.
const maxActionIDs = 1000

// action checks a POST about dead letters and returns its queue and ids;
// it has answered the request (and logged why) when ok is false.
func (s *server) action(w http.ResponseWriter, r *http.Request, name string) (ctx context.Context, q string, ids []string, all, ok bool) {
	ctx, q, ok = s.allowed(w, r, name)
	if !ok {
		return nil, "", nil, false, false
	}
	ids, all = r.PostForm["id"], r.PostFormValue("all") == "1"
	if (len(ids) == 0) == !all || len(ids) > maxActionIDs {
		s.o.Log.Warn().Str("action", name).Str("remote", r.RemoteAddr).Str("queue", q).Msg("web: refused an action: give dead-letter ids, or all, not both")
		s.fail(w, http.StatusBadRequest, fmt.Errorf("%s: give dead-letter ids (at most %d), or all=1, not both or neither", name, maxActionIDs))
		return nil, "", nil, false, false
	}
	return ctx, q, ids, all, true
}

// allowed checks any action's POST (the form, actions on, the token, the
// origin, the queue) and returns its queue; it has answered the request
// (and logged why) when ok is false. Refusals say why: 403 for actions
// off, a wrong token or a cross-origin post, 400 for a bad form, 404 for
// an unknown queue.
func (s *server) allowed(w http.ResponseWriter, r *http.Request, name string) (ctx context.Context, q string, ok bool) {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	log := s.o.Log.With().Str("action", name).Str("remote", r.RemoteAddr).Logger()
	if err := r.ParseForm(); err != nil {
		log.Warn().Err(err).Msg("web: refused an action: bad form")
		s.fail(w, http.StatusBadRequest, fmt.Errorf("%s: %w", name, err))
		return nil, "", false
	}
	if err := s.authorize(r); err != nil {
		log.Warn().Str("queue", r.PostFormValue("queue")).Str("reason", err.Error()).Msg("web: refused an action")
		s.fail(w, http.StatusForbidden, fmt.Errorf("%s refused: %w", name, err))
		return nil, "", false
	}
	ctx = r.Context()
	q, _, err := s.queueOf(ctx, r, nil)
	if err != nil {
		log.Warn().Err(err).Msg("web: refused an action")
		s.fail(w, http.StatusNotFound, err)
		return nil, "", false
	}
	return ctx, q, true
}

// requeue puts dead letters back in the queue (POST queue, id..., token).
func (s *server) requeue(w http.ResponseWriter, r *http.Request) {
	ctx, q, ids, all, ok := s.action(w, r, "requeue")
	if !ok {
		return
	}
	if all {
		for after := ""; ; {
			dls, err := work.ListDead(ctx, s.o.Redis, q, after, 100)
			if err != nil {
				s.actionFailed(w, r, "requeue", q, len(ids), err)
				return
			}
			if len(dls) == 0 {
				break
			}
			for _, d := range dls {
				ids = append(ids, d.ID)
			}
			after = dls[len(dls)-1].ID
		}
	}
	n, skipped := 0, 0
	for _, id := range ids {
		job, err := work.RequeueDead(ctx, s.o.Redis, q, id)
		if errors.Is(err, work.ErrNoPayload) && all {
			skipped++
			continue
		}
		if err != nil {
			s.actionFailed(w, r, "requeue", q, n, err)
			return
		}
		n++
		s.o.Log.Info().Str("action", "requeue").Str("queue", q).Str("job", job).Str("remote", r.RemoteAddr).Msg("web: requeued a dead letter")
	}
	s.o.Log.Info().Str("action", "requeue").Str("queue", q).Bool("all", all).Int("requeued", n).Int("skipped", skipped).
		Str("remote", r.RemoteAddr).Msg("web: requeue done")
	s.redirect(w, r, q, "requeued", n)
}

// purge deletes dead letters (POST queue, id... or all=1, token).
func (s *server) purge(w http.ResponseWriter, r *http.Request) {
	ctx, q, ids, all, ok := s.action(w, r, "purge")
	if !ok {
		return
	}
	var n int64
	var err error
	if all {
		n, err = work.PurgeAllDead(ctx, s.o.Redis, q)
	} else {
		n, err = work.PurgeDead(ctx, s.o.Redis, q, ids...)
	}
	if err != nil {
		s.actionFailed(w, r, "purge", q, 0, err)
		return
	}
	s.o.Log.Info().Str("action", "purge").Str("queue", q).Bool("all", all).Strs("ids", ids).Int64("purged", n).
		Str("remote", r.RemoteAddr).Msg("web: purged dead letters")
	s.redirect(w, r, q, "purged", int(n))
}

func (s *server) actionFailed(w http.ResponseWriter, r *http.Request, name, q string, done int, err error) {
	s.o.Log.Error().Err(err).Str("action", name).Str("queue", q).Int("done_before_failing", done).Str("remote", r.RemoteAddr).Msg("web: action failed")
	code := http.StatusBadGateway
	if errors.Is(err, work.ErrNoDeadLetter) || errors.Is(err, work.ErrNoPayload) {
		code = http.StatusNotFound
	}
	s.fail(w, code, fmt.Errorf("%s (after %d done): %w", name, done, err))
}

// redirect sends the browser back to the queue's page after an action
// (POST, then GET: a reload does not repeat it).
func (s *server) redirect(w http.ResponseWriter, r *http.Request, q, done string, n int) {
	v := url.Values{"queue": {q}, "done": {done}, "n": {strconv.Itoa(n)}}
	http.Redirect(w, r, "/?"+v.Encode()+"#dead", http.StatusSeeOther)
}
