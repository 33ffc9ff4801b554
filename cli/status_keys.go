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

// describeKeyed says, for baton job, that a job waits in its key's list,
// and whether for the key's cap or for its turn.
func describeKeyed(cfg *config.Config, l *work.Location) string {
	level := ""
	if l.Priority != "" {
		level = " at " + l.Priority + " priority"
	}
	s := fmt.Sprintf("job %s: waiting%s in key %s's list (%d waiting, %d running)", l.ID, level, l.Key, l.KeyWaiting, l.KeyRunning)
	if c := cfg.KeyCaps().Of(l.Key); c > 0 && l.KeyRunning >= int64(c) {
		return s + fmt.Sprintf(": waits for its key's cap (key_concurrency %d)", c)
	}
	return s + ": waits for its key's turn"
}
