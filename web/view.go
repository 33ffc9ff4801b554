package web

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	qstatus "github.com/baton-run/baton/internal/status"
	"github.com/baton-run/baton/work"
)

// Bounds of what a page shows.
const (
	deadShown      = 50       // dead letters on the queue page, newest first
	previewBytes   = 120      // payload preview in the dead-letter table
	payloadShown   = 64 << 10 // payload bytes on a dead letter's page
	requestTimeout = 5 * time.Second
)

// page is what every page shows in its header.
type page struct {
	Title   string
	Queue   string // the queue the page is about
	Redis   string // the Redis URL, password redacted
	Actions bool   // actions allowed (forms shown)
	Now     time.Time
}

func (s *server) page(title, q string) page {
	return page{Title: title, Queue: q, Redis: s.o.Config.RedisName(), Actions: s.o.Actions, Now: s.o.Now()}
}

// queueRow is one queue in the queues table.
type queueRow struct {
	Name    string
	Current bool
	*work.Counts
}

// slotRow is one slot in the slot table.
type slotRow struct {
	Name string
	qstatus.Slot
	JobFor time.Duration // how long the current job has run
}

// deadRow is one dead letter in the table.
type deadRow struct {
	work.DeadLetter
	Size    int // payload bytes, -1 without a payload
	Preview string
	Error1  string // the error's first line, bounded
}

type indexPage struct {
	page
	Done      string // the action just done, for the banner
	Queues    []queueRow
	Report    *qstatus.Report
	Slots     []slotRow
	NoSlots   string // why the slot table is missing
	Held      int
	Keep      int
	Charts    charts
	Dead      []deadRow
	DeadShown int
	Batches   []batchRow // open batches, with a progress bar (batches.go)
}

// queueOf is the queue a request names (?queue=), the configured one by
// default; any other must exist in the database. names are the queues that
// do, read when not nil yet.
func (s *server) queueOf(ctx context.Context, r *http.Request, names []string) (string, []string, error) {
	q := r.FormValue("queue")
	if q == "" || q == s.o.Config.Queue {
		return s.o.Config.Queue, names, nil
	}
	if names == nil {
		var err error
		if names, err = work.Queues(ctx, s.o.Redis); err != nil {
			return "", nil, fmt.Errorf("list queues: %w", err)
		}
	}
	if !slices.Contains(names, q) {
		return "", names, fmt.Errorf("%q: %w", q, errUnknownQueue)
	}
	return q, names, nil
}

func (s *server) index(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	names, err := work.Queues(ctx, s.o.Redis)
	if err != nil {
		s.fail(w, http.StatusBadGateway, fmt.Errorf("redis at %s: list queues: %w", s.o.Config.RedisName(), err))
		return
	}
	q, names, err := s.queueOf(ctx, r, names)
	if err != nil {
		s.fail(w, http.StatusNotFound, err)
		return
	}
	p := indexPage{page: s.page("baton · "+q, q), Done: doneText(r), DeadShown: deadShown}
	if !slices.Contains(names, s.o.Config.Queue) {
		names = append([]string{s.o.Config.Queue}, names...)
	}
	for _, n := range names {
		c, err := work.ReadCounts(ctx, s.o.Redis, n)
		if err != nil {
			s.fail(w, http.StatusBadGateway, err)
			return
		}
		p.Queues = append(p.Queues, queueRow{Name: n, Current: n == q, Counts: c})
	}
	cfg := *s.o.Config
	if q != cfg.Queue {
		cfg.Periodic = nil // the config's entries are its queue's
	}
	cfg.Queue = q
	if strings.ContainsAny(q, "/\x00") || strings.HasPrefix(q, ".") {
		p.NoSlots = "this queue's name cannot name lock files"
		p.Report = &qstatus.Report{Queue: q}
		p.Report.Jobs, _ = work.ReadCounts(ctx, s.o.Redis, q)
	} else {
		rep, jerr, err := qstatus.Read(ctx, &cfg, s.o.Redis)
		if err != nil {
			s.fail(w, http.StatusInternalServerError, fmt.Errorf("read slots in %s: %w", cfg.LockDir, err))
			return
		}
		if jerr != nil {
			s.fail(w, http.StatusBadGateway, jerr)
			return
		}
		p.Report = rep
		p.Keep = cfg.Slots
		now := s.o.Now()
		add := func(role string, ss []qstatus.Slot) {
			for _, sl := range ss {
				row := slotRow{Name: role + "-" + strconv.Itoa(sl.Slot), Slot: sl}
				if sl.JobSince != nil {
					row.JobFor = now.Sub(*sl.JobSince)
				}
				if sl.Held && role == "run" {
					p.Held++
				}
				p.Slots = append(p.Slots, row)
			}
		}
		add("run", rep.Run)
		add("standby", rep.Standby)
	}
	samples, err := work.ReadSamples(ctx, s.o.Redis, q)
	if err != nil {
		s.fail(w, http.StatusBadGateway, err)
		return
	}
	if p.Report.Jobs != nil {
		p.Charts = buildCharts(samples, p.Report.Jobs.Stats, s.o.Now())
	}
	p.Batches = openBatches(ctx, s.o.Redis, q)
	dls, err := work.ListDeadNewest(ctx, s.o.Redis, q, deadShown)
	if err != nil {
		s.fail(w, http.StatusBadGateway, fmt.Errorf("list dead letters: %w", err))
		return
	}
	for _, d := range dls {
		row := deadRow{DeadLetter: d, Size: -1, Error1: firstLine(text(d.Error, false), 100)}
		if d.Payload != nil {
			row.Size, row.Preview = len(d.Payload), preview(d.Payload, previewBytes)
		}
		p.Dead = append(p.Dead, row)
	}
	s.render(w, http.StatusOK, "index", p)
}

// doneText is the banner after an action (?done=requeued&n=2), built from
// known words only, never from the query's text.
func doneText(r *http.Request) string {
	if t := controlDone(r); t != "" {
		return t
	}
	n, err := strconv.Atoi(r.FormValue("n"))
	if err != nil || n < 0 {
		return ""
	}
	switch r.FormValue("done") {
	case "requeued":
		return fmt.Sprintf("requeued %d dead letters", n)
	case "purged":
		return fmt.Sprintf("purged %d dead letters", n)
	}
	return ""
}

// about starts a page about one queue and one id: a bounded context, the
// queue (?queue=, which must exist) and the id (?id=); ok is false when it
// has answered the request already.
func (s *server) about(w http.ResponseWriter, r *http.Request) (ctx context.Context, cancel context.CancelFunc, q, id string, ok bool) {
	ctx, cancel = context.WithTimeout(r.Context(), requestTimeout)
	q, _, err := s.queueOf(ctx, r, nil)
	if err != nil {
		s.fail(w, http.StatusNotFound, err)
		return ctx, cancel, "", "", false
	}
	return ctx, cancel, q, strings.TrimSpace(r.FormValue("id")), true
}

type jobPage struct {
	page
	Done string // the action just done (a cancel), for the banner
	ID   string
	Loc  *work.Location
	Err  string

	Progress *work.ProgressNote // a running job's, if it reported one
	Result   *shownResult       // a done job's, if it has one
}

func (s *server) job(w http.ResponseWriter, r *http.Request) {
	ctx, cancel, q, id, ok := s.about(w, r)
	defer cancel()
	if !ok {
		return
	}
	p := jobPage{page: s.page("baton · job "+id, q), ID: id, Done: controlDone(r)}
	status := http.StatusOK
	if id == "" {
		p.Err, status = "give a job id (the one baton enqueue printed, like 1700000000000-0)", http.StatusBadRequest
	} else if loc, err := work.Locate(ctx, s.o.Redis, q, id); err == nil {
		p.Loc = loc
		s.aboutJob(&p, r, q)
	} else {
		p.Err, status = err.Error(), http.StatusBadRequest
	}
	s.render(w, status, "job", p)
}

type deadPage struct {
	page
	work.DeadLetter
	Text      string // the payload as text (valid UTF-8), control bytes escaped
	Hex       string // else a hex dump
	Shown     int    // payload bytes shown
	Size      int
	Truncated bool
	None      bool // no payload at all (a malformed entry)
}

func (s *server) dead(w http.ResponseWriter, r *http.Request) {
	ctx, cancel, q, id, ok := s.about(w, r)
	defer cancel()
	if !ok {
		return
	}
	d, err := work.GetDead(ctx, s.o.Redis, q, id)
	if err != nil {
		code := http.StatusBadGateway
		if errors.Is(err, work.ErrNoDeadLetter) {
			code = http.StatusNotFound
		}
		s.fail(w, code, err)
		return
	}
	p := &deadPage{page: s.page("baton · dead letter "+d.JobID, q), DeadLetter: *d, Size: len(d.Payload), None: d.Payload == nil}
	b := d.Payload
	if len(b) > payloadShown {
		b, p.Truncated = b[:payloadShown], true
	}
	p.Error = text(d.Error, true)
	for k, v := range p.Fields {
		p.Fields[k] = text(v, false)
	}
	p.Shown = len(b)
	if utf8.Valid(b) || p.Truncated && utf8.Valid(trimPartialRune(b)) {
		p.Text = escapeControls(string(trimPartialRune(b)), true)
	} else {
		p.Hex = hex.Dump(b)
	}
	s.render(w, http.StatusOK, "dead", p)
}

type errorPage struct {
	page
	Code int
	Err  string
}

// fail renders an error page; the message never holds the Redis password
// (errors name Redis by its redacted URL or address only).
func (s *server) fail(w http.ResponseWriter, code int, err error) {
	s.render(w, code, "error", errorPage{page: s.page("baton · error", s.o.Config.Queue), Code: code, Err: err.Error()})
}

func (s *server) render(w http.ResponseWriter, code int, name string, data any) {
	var b strings.Builder
	if err := s.pages[name].Execute(&b, data); err != nil {
		s.o.Log.Error().Err(err).Str("page", name).Msg("web: render")
		http.Error(w, "render: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(b.String()))
}

// preview is the first n bytes of a payload as one line of text: control
// characters and invalid UTF-8 escaped (\n, \x00), "…" when cut.
func preview(b []byte, n int) string {
	cut := len(b) > n
	if cut {
		b = trimPartialRune(b[:n])
	}
	var s string
	if utf8.Valid(b) {
		s = escapeControls(string(b), false)
	} else {
		s = strconv.Quote(string(b))
		s = s[1 : len(s)-1]
	}
	if cut {
		s += "…"
	}
	return s
}

// text is s, which came from a job (its error, a producer's field), made
// safe to show: invalid UTF-8 replaced, control characters escaped.
func text(s string, keepLines bool) string {
	return escapeControls(strings.ToValidUTF8(s, "\ufffd"), keepLines)
}

// trimPartialRune drops a rune cut in half at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(b) > 0; i++ {
		if r, size := utf8.DecodeLastRune(b); r != utf8.RuneError || size != 1 {
			return b
		}
		b = b[:len(b)-1]
	}
	return b
}

// escapeControls writes control characters as Go escapes, so that a
// payload cannot move the cursor, ring or hide text; keepLines keeps \n and
// \t as they are (a <pre> block).
func escapeControls(s string, keepLines bool) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case keepLines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Bidi_Control, r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func firstLine(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if len(s) > n {
		s = string(trimPartialRune([]byte(s[:n]))) + "…"
	}
	return s
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"clock": func(t *time.Time) string {
		if t == nil || t.IsZero() {
			return "-"
		}
		return t.Local().Format("15:04:05")
	},
	"datetime": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Local().Format(time.DateTime)
	},
	"dur": func(d time.Duration) string {
		switch {
		case d <= 0:
			return "-"
		case d < time.Second:
			return d.Round(time.Millisecond).String()
		}
		return d.Round(100 * time.Millisecond).String()
	},
	"ms": func(n int64) time.Duration { return time.Duration(n) * time.Millisecond },
	"until": func(now time.Time, t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		d := t.Sub(now).Round(time.Second)
		if d <= 0 {
			return "due now"
		}
		return "in " + d.String()
	},
	"ago": func(now time.Time, t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return max(now.Sub(t).Round(time.Second), 0).String() + " ago"
	},
	"num": func(n int64) string {
		s := strconv.FormatInt(n, 10)
		for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	},
}
