package config

import (
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/periodic"
	"github.com/baton-run/baton/work"
)

const periodicFile = `queue = "q"

[[periodic]]
name = "report"
schedule = "CRON_TZ=Europe/Berlin 30 2 * * *"
payload = "daily"
priority = "high"
timeout = "5m"
max_attempts = 2
catch_up = "all"
catch_up_max = 7

[[periodic]]
name = "beat"
schedule = "@every 10s"
payload_base64 = "AAE="
`

func TestPeriodicEntries(t *testing.T) {
	c, err := load(t, periodicFile, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	es, err := c.PeriodicEntries()
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 {
		t.Fatalf("entries: %+v", es)
	}
	r, b := es[0], es[1]
	if r.Name != "report" || string(r.Payload) != "daily" || r.Priority != work.PriorityHigh || r.Timeout != 5*time.Minute || r.MaxAttempts != 2 || r.CatchUp != periodic.CatchUpAll || r.CatchUpMax != 7 {
		t.Errorf("report = %+v", r)
	}
	if b.Name != "beat" || string(b.Payload) != "\x00\x01" || b.CatchUp != periodic.CatchUpLatest || b.CatchUpMax != 100 || b.Overlap != "allow" {
		t.Errorf("beat = %+v", b)
	}
}

// A bad entry names the file, the line of the bad key, the entry and the key.
func TestPeriodicBadEntry(t *testing.T) {
	for _, tc := range []struct{ edit, old, want string }{
		{`catch_up = "all"`, `catch_up = "some"`, `:10: periodic "report": catch_up: "some": want latest, none or all`},
		{`schedule = "@every 10s"`, `schedule = "@every 10x"`, `:15: periodic "beat": schedule: "@every 10x"`},
		{`schedule = "CRON_TZ=Europe/Berlin 30 2 * * *"`, `schedule = "CRON_TZ=Nowhere/Land 30 2 * * *"`, `:5: periodic "report": schedule:`},
		{`name = "beat"`, `name = "report"`, `:14: periodic "report": name: "report": another entry has this name`},
		{`name = "beat"`, `nom = "beat"`, `:14: periodic.nom: unknown key`},
		{`priority = "high"`, `priority = "urgent"`, `:7: periodic "report": priority: "urgent"`},
		{`payload_base64 = "AAE="`, `payload_base64 = "*"`, `:16: periodic "beat": payload_base64: not base64`},
		{`max_attempts = 2`, `max_attempts = 0`, ``}, // unset: the queue's
		{`max_attempts = 2`, `max_attempts = 2000`, `:9: periodic "report": max_attempts: 2000`},
		{`catch_up_max = 7`, `catch_up_max = 100000`, `:11: periodic "report": catch_up_max: 100000`},
		{`[[periodic]]
name = "beat"`, `[[periodic]]
overlap = "skip"`, `:13: periodic entry 2: name: missing`},
	} {
		file := strings.Replace(periodicFile, tc.edit, tc.old, 1)
		_, err := load(t, file, nil, nil)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.old, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err = %v, want %q", tc.old, err, tc.want)
		}
	}
}
