package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/work"
)

// printKeys prints the keys block of status: totals, the keys at their cap,
// the busiest keys.
func printKeys(w io.Writer, k *work.KeyReport) {
	if k == nil {
		return
	}
	fmt.Fprintf(w, "keys  %d with jobs: %d waiting, %d running", k.Keys, k.Waiting, k.Running)
	if k.NAtCap > 0 {
		fmt.Fprintf(w, "; %d at their cap: %s", k.NAtCap, strings.Join(k.AtCap, ", "))
		if k.NAtCap > len(k.AtCap) {
			fmt.Fprint(w, ", …")
		}
	}
	if k.Partial {
		fmt.Fprintf(w, " (the first %d key streams only)", work.MaxKeyStreamsRead)
	}
	fmt.Fprintln(w)
	for _, l := range k.Top {
		capped := ""
		if l.Cap > 0 {
			capped = fmt.Sprintf(" (cap %d)", l.Cap)
			if l.AtCap {
				capped = fmt.Sprintf(" (at cap %d)", l.Cap)
			}
		}
		fmt.Fprintf(w, "      %-24s %6d waiting %4d running%s\n", l.Key, l.Waiting, l.Running, capped)
	}
	fmt.Fprintln(w)
}

// describeKeyed says, for baton job, where a job of a key is: waiting in
// its key's stream, and whether for the key's cap or for its turn; or
// running, as any running job, with its key's counts.
func describeKeyed(cfg *config.Config, l *work.Location, h jobHolder) string {
	counts := fmt.Sprintf("%d waiting, %d running", l.KeyWaiting, l.KeyRunning)
	if l.State != work.StateWaiting {
		return describeJob(l, h) + fmt.Sprintf("; key %s (%s)", l.Key, counts)
	}
	level := ""
	if l.Priority != "" {
		level = " at " + l.Priority + " priority"
	}
	s := fmt.Sprintf("job %s: waiting%s in key %s's stream (%s, %d ahead of it)", l.ID, level, l.Key, counts, l.Ahead)
	if c := cfg.KeyCaps().Of(l.Key); c > 0 && l.KeyRunning >= int64(c) {
		return s + fmt.Sprintf(": waits for its key's cap (key_concurrency %d)", c)
	}
	return s + ": waits for its key's turn"
}
