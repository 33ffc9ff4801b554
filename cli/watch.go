package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/baton-run/baton/internal/config"
)

// watchStatus refreshes status every interval until ctx ends or SIGINT or
// SIGTERM comes (exit 0). It only reads, like status.
func watchStatus(ctx context.Context, e *env, cfg *config.Config, interval time.Duration, asJSON bool) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var w watcher
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		rep, _, err := readStatus(ctx, cfg)
		if err != nil {
			return err
		}
		w.update(rep, time.Now())
		if asJSON {
			b, err := json.Marshal(struct {
				*statusReport
				Rates map[string]float64 `json:"rates_per_second,omitempty"`
			}{rep, w.rates})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.Stdout, "%s\n", b)
		} else {
			var b strings.Builder
			if isTerminal(e.Stdout) {
				b.WriteString("\033[H\033[2J") // home, clear: one screen per refresh
			}
			printStatus(&b, cfg, rep)
			b.WriteString(w.summary(interval))
			fmt.Fprint(e.Stdout, b.String())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// watcher turns successive reports into rates; the watch loop owns it.
// The slot events are the holders' own, from Redis (status.Report.Events).
type watcher struct {
	prev  *statusReport
	at    time.Time
	rates map[string]float64
}

func (w *watcher) update(rep *statusReport, now time.Time) {
	if p := w.prev; p != nil {
		secs := now.Sub(w.at).Seconds()
		if rep.Jobs != nil && p.Jobs != nil && secs > 0 {
			w.rates = map[string]float64{
				"done":    float64(rep.Jobs.Done-p.Jobs.Done) / secs,
				"dead":    float64(max(0, rep.Jobs.Dead-p.Jobs.Dead)) / secs,
				"waiting": float64(rep.Jobs.Waiting-p.Jobs.Waiting) / secs,
			}
		}
	}
	w.prev, w.at = rep, now
}

func (w *watcher) summary(interval time.Duration) string {
	var b strings.Builder
	if r := w.rates; r != nil {
		fmt.Fprintf(&b, "\nrates  %.1f done/s, %.1f dead/s, waiting %+.1f/s\n", r["done"], r["dead"], r["waiting"])
	}
	fmt.Fprintf(&b, "\nrefreshing every %s; Ctrl-C to stop\n", interval)
	return b.String()
}
