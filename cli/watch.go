package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/baton-run/baton/internal/config"
)

// watchedEvents is how many slot events --watch keeps on screen.
const watchedEvents = 8

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
				Rates  map[string]float64 `json:"rates_per_second,omitempty"`
				Events []string           `json:"events,omitempty"`
			}{rep, w.rates, w.events})
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

// watcher turns successive reports into rates and events; the watch loop owns it.
type watcher struct {
	prev   *statusReport
	at     time.Time
	rates  map[string]float64
	events []string
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
			if d := rep.Jobs.Dead - p.Jobs.Dead; d > 0 {
				w.event(now, fmt.Sprintf("%d dead letters ('baton dead list')", d))
			}
		}
		w.slotEvents(now, "run", p.Run, rep.Run)
		w.slotEvents(now, "standby", p.Standby, rep.Standby)
	}
	w.prev, w.at = rep, now
}

// slotEvents notes holders that came and went between two looks.
func (w *watcher) slotEvents(now time.Time, role string, before, after []slotStatus) {
	for i := range min(len(before), len(after)) {
		b, a := before[i], after[i]
		name := role + "-" + strconv.Itoa(i)
		switch {
		case b.Held && a.Held && b.PID != a.PID:
			w.event(now, fmt.Sprintf("%s: pid %d left, pid %d took over", name, b.PID, a.PID))
		case b.Held && !a.Held:
			if b.Until != nil && now.After(*b.Until) {
				w.event(now, fmt.Sprintf("%s: pid %d retired", name, b.PID))
			} else {
				w.event(now, fmt.Sprintf("%s: pid %d left before its lifetime ended (killed, stopped, or failed)", name, b.PID))
			}
		case !b.Held && a.Held:
			w.event(now, fmt.Sprintf("%s: pid %d took the slot", name, a.PID))
		}
	}
}

func (w *watcher) event(now time.Time, s string) {
	w.events = append(w.events, now.Local().Format("15:04:05")+" "+s)
	if n := len(w.events) - watchedEvents; n > 0 {
		w.events = w.events[n:]
	}
}

func (w *watcher) summary(interval time.Duration) string {
	var b strings.Builder
	if r := w.rates; r != nil {
		fmt.Fprintf(&b, "\nrates  %.1f done/s, %.1f dead/s, waiting %+.1f/s\n", r["done"], r["dead"], r["waiting"])
	}
	if len(w.events) > 0 {
		b.WriteString("\nevents\n")
		for _, e := range w.events {
			b.WriteString("  " + e + "\n")
		}
	}
	fmt.Fprintf(&b, "\nrefreshing every %s; Ctrl-C to stop\n", interval)
	return b.String()
}
