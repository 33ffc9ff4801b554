package web

import (
	"encoding/hex"
	"errors"
	"net/http"
	"unicode/utf8"

	"github.com/baton-run/baton/work"
)

// resultShown is the most of a job's result its page shows; the rest is
// downloadable raw (/job/result).
const resultShown = 4 << 10

// shownResult is a done job's result as its page shows it: text with
// control bytes escaped when it is UTF-8, else a hex dump, cut at
// resultShown bytes.
type shownResult struct {
	Size      int
	Shown     int
	Truncated bool
	Text, Hex string
}

func showResult(b []byte) *shownResult {
	r := &shownResult{Size: len(b)}
	if len(b) > resultShown {
		b, r.Truncated = b[:resultShown], true
	}
	r.Shown = len(b)
	if utf8.Valid(b) || r.Truncated && utf8.Valid(trimPartialRune(b)) {
		r.Text = escapeControls(string(trimPartialRune(b)), true)
	} else {
		r.Hex = hex.Dump(b)
	}
	return r
}

// aboutJob adds a running job's progress and a done job's result to its
// page.
func (s *server) aboutJob(p *jobPage, r *http.Request, q string) {
	switch p.Loc.State {
	case work.StateRunning:
		if n, ok, err := work.ProgressOf(r.Context(), s.o.Redis, q, p.ID); err == nil && ok {
			n.Msg = text(n.Msg, false)
			p.Progress = &n
		}
	case work.StateDone:
		if b, err := work.Result(r.Context(), s.o.Redis, q, p.ID); err == nil && b != nil {
			p.Result = showResult(b)
		}
	}
}

// result serves a done job's result, raw, as a download (never rendered:
// it is the job's bytes, whatever they are).
func (s *server) result(w http.ResponseWriter, r *http.Request) {
	ctx, cancel, q, id, ok := s.about(w, r)
	defer cancel()
	if !ok {
		return
	}
	b, err := work.Result(ctx, s.o.Redis, q, id)
	switch {
	case errors.Is(err, work.ErrNotDone) || errors.Is(err, work.ErrUnknownJob):
		s.fail(w, http.StatusNotFound, err)
		return
	case err != nil:
		s.fail(w, http.StatusBadGateway, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="result"`)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(b)
}
