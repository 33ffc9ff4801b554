package cli

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestCompletionCoversTheTable: each shell's script names every listed
// command and every flag of its flag set, so a command or flag added to the
// table is completed without touching the generators.
func TestCompletionCoversTheTable(t *testing.T) {
	for _, sh := range shells {
		t.Run(sh, func(t *testing.T) {
			out, errOut, code := mainT(t, "", "completion", sh)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, c := range commands() {
				if c.hidden {
					if strings.Contains(out, c.name+")") || strings.Contains(out, "-a "+c.name+" ") {
						t.Errorf("hidden command %s is completed", c.name)
					}
					continue
				}
				if !strings.Contains(out, c.name) {
					t.Errorf("command %s missing", c.name)
				}
				c.flags().VisitAll(func(f *pflag.Flag) {
					want := "--" + f.Name
					if sh == "fish" {
						want = "-l " + f.Name
					}
					if !strings.Contains(out, want) {
						t.Errorf("%s: flag %s missing", c.name, want)
					}
				})
				for _, w := range c.words {
					if !strings.Contains(out, w) {
						t.Errorf("%s: word %s missing", c.name, w)
					}
				}
			}
		})
	}
}
