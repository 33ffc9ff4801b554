// Package web is baton's read-only dashboard, `baton web`: the queues in the
// Redis database, a queue's run and standby slots, its jobs, throughput and
// latency over the last hour, its dead letters with their payloads, and job
// lookups. Pages are rendered on the server with html/template (every byte
// of a payload is escaped); the CSS and the little script are embedded
// files, so there is no build step and the Content-Security-Policy forbids
// inline script.
//
// New builds the handler; the caller owns the listener:
//
//	h, err := web.New(web.Options{Config: cfg, Redis: rdb, Log: log})
//	http.Serve(ln, h)
//
// Requeueing and purging dead letters, pausing and resuming a queue and
// cancelling a job are refused unless Options.Actions is set, and then need
// Options.Token in each POST (compared in constant time); every action,
// and every refused one, is logged. Nothing else writes: the dashboard
// never takes a slot (invariant 6).
package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/internal/serve"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// MinTokenLen is the shortest token Options.Token may be, in bytes.
const MinTokenLen = 16

// CSP is the Content-Security-Policy of every response: scripts, styles
// and images only from the dashboard itself (no inline script or style),
// forms only to it, no framing.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Options configure the dashboard.
type Options struct {
	// Config is the default queue and where its slots are: lock_dir, slots,
	// standby_slots (the slot table of any queue reads that lock dir with
	// those counts) and redis_url, shown redacted.
	Config *config.Config
	// Redis is the database the queues live in.
	Redis redis.UniversalClient
	// Actions allows requeueing and purging dead letters, pausing and
	// resuming a queue and cancelling jobs, with Token.
	Actions bool
	// Token is the secret each action must carry (form field token, or
	// Authorization: Bearer); at least MinTokenLen bytes when Actions is set.
	Token string
	// AnyHost accepts requests whatever their Host header. Off, only a
	// loopback host (localhost, 127.0.0.0/8, ::1) is served: a web page
	// elsewhere cannot point a DNS name at 127.0.0.1 and read the dashboard
	// (DNS rebinding). Set it when the dashboard listens beyond loopback.
	AnyHost bool
	// Log hears every action and every refused one.
	Log zerolog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Errors of New.
var (
	ErrShortToken   = fmt.Errorf("web: actions need a token of at least %d bytes", MinTokenLen)
	ErrNoRedis      = errors.New("web: no redis client")
	errActionsOff   = errors.New("actions are off: start baton web with --allow-actions and a token")
	errBadToken     = errors.New("wrong or missing token")
	errCrossOrigin  = errors.New("cross-origin request refused")
	errUnknownQueue = errors.New("no such queue in this Redis database")
)

// server is the dashboard's handler. Its fields are set by New and only
// read afterwards, so any number of requests may share it.
type server struct {
	o         Options
	tokenHash [sha256.Size]byte
	pages     map[string]*template.Template
	static    http.Handler
}

// New returns the dashboard's handler.
func New(o Options) (http.Handler, error) {
	if o.Redis == nil {
		return nil, ErrNoRedis
	}
	if o.Actions && len(o.Token) < MinTokenLen {
		return nil, ErrShortToken
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &server{o: o, tokenHash: sha256.Sum256([]byte(o.Token)), pages: map[string]*template.Template{}}
	for _, p := range []string{"index", "job", "dead", "error"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/control.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("web: template %s: %w", p, err)
		}
		s.pages[p] = t
	}
	sub, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, err
	}
	s.static = http.StripPrefix("/static/", http.FileServer(http.FS(sub)))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.index)
	mux.HandleFunc("GET /job", s.job)
	mux.HandleFunc("GET /job/result", s.result)
	mux.HandleFunc("GET /dead", s.dead)
	mux.HandleFunc("POST /dead/requeue", s.requeue)
	mux.HandleFunc("POST /dead/purge", s.purge)
	mux.HandleFunc("POST /queue/pause", s.pause)
	mux.HandleFunc("POST /queue/resume", s.resume)
	mux.HandleFunc("POST /job/cancel", s.cancel)
	mux.Handle("GET /static/", s.static)
	return s.guard(mux), nil
}

// guard sets the security headers of every response and refuses a request
// for a host that is not loopback (unless AnyHost).
func (s *server) guard(next http.Handler) http.Handler {
	if !s.o.AnyHost {
		next = serve.LoopbackOnly(next, "baton web serves loopback hosts only (localhost, 127.0.0.1, [::1]); see --allow-remote", func(r *http.Request) {
			s.o.Log.Warn().Str("host", r.Host).Str("remote", r.RemoteAddr).Msg("web: refused a request for a host that is not loopback")
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// LoopbackHost reports whether hostport (a Host header or a listen address)
// names this machine's loopback: localhost, 127.0.0.0/8 or ::1. It is
// serve.LoopbackHost, which baton metrics --listen shares.
func LoopbackHost(hostport string) bool { return serve.LoopbackHost(hostport) }

// authorize checks that an action is allowed and carries the token, and
// that a browser sent it from the dashboard's own pages.
func (s *server) authorize(r *http.Request) error {
	if !s.o.Actions {
		return errActionsOff
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		if !strings.EqualFold(strings.TrimPrefix(strings.TrimPrefix(o, "http://"), "https://"), r.Host) {
			return errCrossOrigin
		}
	}
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return errCrossOrigin
	}
	tok := r.PostFormValue("token")
	if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && tok == "" {
		tok = b
	}
	// Hashes of equal length, so the compare takes the same time whatever
	// the length of the guess.
	got := sha256.Sum256([]byte(tok))
	if tok == "" || subtle.ConstantTimeCompare(got[:], s.tokenHash[:]) != 1 {
		return errBadToken
	}
	return nil
}
