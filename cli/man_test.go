package cli

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestManCoversTheTable: baton(1) has a section for every command, lists
// each command's flags and every config key.
func TestManCoversTheTable(t *testing.T) {
	out, errOut, code := mainT(t, "", "man")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, c := range commands() {
		if !strings.Contains(out, `.SS "baton `+c.name+`"`) {
			t.Errorf("no section for %s", c.name)
		}
		c.flags().VisitAll(func(f *pflag.Flag) {
			if !strings.Contains(out, `\fB`+roff("--"+f.Name)) && !strings.Contains(out, ", "+roff("--"+f.Name)+`\fR`) {
				t.Errorf("%s: flag --%s missing", c.name, f.Name)
			}
		})
	}
	fs, _ := runFlags()
	fs.VisitAll(func(f *pflag.Flag) {
		if key := strings.ReplaceAll(f.Name, "-", "_"); f.Name != "help" && f.Name != "config" && !strings.Contains(out, `\fB`+key+`\fR`) {
			t.Errorf("config key %s missing", key)
		}
	})
}
