package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/internal/serve"
	"github.com/baton-run/baton/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
)

const metricsUsage = `Usage: baton metrics [flags]

Print the queue's Prometheus metrics once, or with --listen serve them on
/metrics for as long as it runs. Holders live minutes, so the history lives
in Redis (totals, dead letters by reason, a job-duration histogram, kept by
the scripts that settle jobs) and is read at each scrape, with the queue's
state (waiting, pending, scheduled, retrying, dead, the age of the oldest
waiting job) and the slots (held, k, each holder's age, overdue or without
a record). It only reads: no slot taken, nothing written. On a loopback
--listen address it serves loopback Host headers only (421 otherwise, as
baton web does); beyond loopback, any. See docs/observability.md for every
metric, alert rules and a dashboard.

{{flags}}
Example:
  # node_exporter's textfile collector, from cron: write, then rename
  * * * * * /usr/local/bin/baton metrics --config /etc/baton/thumbs.toml > /var/lib/node_exporter/baton.prom.$$ && mv /var/lib/node_exporter/baton.prom.$$ /var/lib/node_exporter/baton.prom
  # or a small service Prometheus scrapes
  baton metrics --config /etc/baton/thumbs.toml --listen 127.0.0.1:9187
`

// metricsOpts are metrics's flags.
type metricsOpts struct {
	cf     *config.Flags
	listen string
}

// metricsFlags builds metrics's flag set.
func metricsFlags() (*pflag.FlagSet, *metricsOpts) {
	fs := flagSet("metrics")
	o := &metricsOpts{cf: config.Bind(fs, readKeys...)}
	fs.StringVar(&o.listen, "listen", "", "serve /metrics on this address (host:port) until SIGTERM or SIGINT")
	return fs, o
}

func runMetrics(ctx context.Context, e *env, args []string) error {
	fs, o := metricsFlags()
	cf, listen := o.cf, &o.listen
	if err := parse(e, fs, metricsUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 { // not a queue name: that is --queue
		return usagef("the queue is a flag: baton metrics --queue "+fs.Arg(0), "metrics: unexpected argument %q", fs.Arg(0))
	}
	if *listen != "" {
		if _, _, err := net.SplitHostPort(*listen); err != nil {
			return usagef("give host:port, e.g. --listen 127.0.0.1:9187", "metrics: --listen %s: %v", *listen, err)
		}
	}
	cfg, err := cf.Load(e.Getenv)
	if err != nil {
		return err
	}
	run, sb, err := slotSets(cfg)
	if err != nil {
		return err
	}
	q := metrics.Queue{Name: cfg.Queue, Run: run, Keep: cfg.MinSlots}
	if sb != nil {
		q.Standby = sb
	}
	rdb, err := connectLazy(cfg, 2)
	if err != nil {
		return err
	}
	defer rdb.Close()
	c := metrics.NewCollector(rdb, q)
	if *listen == "" {
		if err := metrics.Write(e.Stdout, c); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		return nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	return serveMetrics(ctx, e, *listen, reg)
}

// serveMetrics serves reg on addr until ctx ends or a signal comes. On a
// loopback address only loopback Host headers are served, as baton web
// does (a DNS name pointed at 127.0.0.1 must not read it); beyond loopback
// Prometheus scrapes it by whatever name it knows the host.
func serveMetrics(ctx context.Context, e *env, addr string, reg *prometheus.Registry) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics: listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	var h http.Handler = mux
	if host, _, _ := net.SplitHostPort(addr); serve.LoopbackHost(host) {
		h = serve.LoopbackOnly(mux, "baton metrics on a loopback address serves loopback hosts only (localhost, 127.0.0.1, [::1]); listen beyond loopback to be scraped by name",
			func(r *http.Request) {
				fmt.Fprintf(e.Stderr, "baton: metrics: refused a request for host %q from %s: not loopback\n", r.Host, r.RemoteAddr)
			})
	}
	fmt.Fprintf(e.Stderr, "baton: serving metrics on http://%s/metrics\n", ln.Addr())
	return serveUntilSignal(ctx, h, ln, "metrics")
}

// serveUntilSignal serves h on ln (with serve.Server's timeouts) until ctx
// ends or SIGTERM or SIGINT comes, then shuts it down, giving requests 5s
// to finish. name starts its errors.
func serveUntilSignal(ctx context.Context, h http.Handler, ln net.Listener, name string) error {
	srv := serve.Server(h)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("%s: %w", name, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
