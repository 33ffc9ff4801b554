package cli

import (
	"context"
	"fmt"
	"net"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/web"
	"github.com/spf13/pflag"
)

const webUsage = `Usage: baton web [flags]

Serve a read-only dashboard for as long as it runs: every queue in the
Redis database with its jobs, the queue's run and standby slots (pid, host,
since, until, jobs done, current job), throughput and latency over the last
hour (from per-minute samples that holders keep in Redis), its dead letters
with their reasons and payloads, and job lookups. It never takes a slot.

It listens on loopback only unless --allow-remote is given, and then
serves any Host header; put it behind a TLS proxy with authentication.
Requeueing and purging dead letters, pausing and resuming the queue and
cancelling a job need --allow-actions and a token of at least 16 bytes
(--token, or better the environment variable BATON_WEB_TOKEN: a flag
shows in ps), typed into the page's forms; every action is logged. See
docs/observability.md and docs/control.md.

{{flags}}
Example:
  baton web --config /etc/baton/thumbs.toml
  BATON_WEB_TOKEN=$(cat /etc/baton/web-token) baton web --queue thumbs --allow-actions --listen 127.0.0.1:8080
  ssh -L 8080:127.0.0.1:8080 web1    # then open http://127.0.0.1:8080/ here
`

// webOpts are web's flags.
type webOpts struct {
	cf           *config.Flags
	listen       string
	allowRemote  bool
	allowActions bool
	token        string
}

// webFlags builds web's flag set.
func webFlags() (*pflag.FlagSet, *webOpts) {
	fs := flagSet("web")
	o := &webOpts{cf: config.Bind(fs, append([]string{"log_level", "log_format"}, readKeys...)...)}
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "serve the dashboard on this address (host:port) until SIGTERM or SIGINT")
	fs.BoolVar(&o.allowRemote, "allow-remote", false, "allow a --listen address beyond loopback (and any Host header)")
	fs.BoolVar(&o.allowActions, "allow-actions", false, "allow requeue and purge of dead letters, pause, resume and cancel, with the token")
	fs.StringVar(&o.token, "token", "", "the actions' token, at least 16 bytes (default: env BATON_WEB_TOKEN)")
	return fs, o
}

func runWeb(ctx context.Context, e *env, args []string) error {
	fs, o := webFlags()
	if err := parse(e, fs, webUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("run 'baton web --help'", "web: unexpected argument %q", fs.Arg(0))
	}
	host, _, err := net.SplitHostPort(o.listen)
	if err != nil {
		return usagef("give host:port, e.g. --listen 127.0.0.1:8080", "web: --listen %s: %v", o.listen, err)
	}
	if !o.allowRemote && !web.LoopbackHost(host) {
		return usagef("bind 127.0.0.1 and reach it over ssh -L, or add --allow-remote behind a TLS proxy with authentication",
			"web: --listen %s is not a loopback address", o.listen)
	}
	token := o.token
	if token == "" {
		token = e.Getenv("BATON_WEB_TOKEN")
	}
	if o.allowActions && len(token) < web.MinTokenLen {
		return usagef("set BATON_WEB_TOKEN (or --token) to a secret, e.g. $(head -c 24 /dev/urandom | base64)",
			"web: --allow-actions needs a token of at least %d bytes", web.MinTokenLen)
	}
	cfg, err := o.cf.Load(e.Getenv)
	if err != nil {
		return err
	}
	// The dashboard serves every queue of the database: its lines name the
	// queue they are about (an action's), not --queue's on every line too.
	log := newLoggerFor(e.Stderr, cfg, "")
	rdb, err := connectLazy(cfg, 4)
	if err != nil {
		return err
	}
	defer rdb.Close()
	h, err := web.New(web.Options{Config: cfg, Redis: rdb, Actions: o.allowActions, Token: token, AnyHost: o.allowRemote, Log: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("web: listen: %w", err)
	}
	log.Info().Str("queue", cfg.Queue).Str("url", "http://"+ln.Addr().String()+"/").Str("redis", cfg.RedisName()).Bool("actions", o.allowActions).
		Msg("serving the dashboard")
	if o.allowRemote && !web.LoopbackHost(host) {
		log.Warn().Msg("serving beyond loopback: anyone who reaches this address reads the dashboard (payloads included); put it behind a TLS proxy with authentication")
	}
	return serveUntilSignal(ctx, h, ln, "web")
}
