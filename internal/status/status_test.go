package status

import (
	"testing"
	"time"

	"github.com/baton-run/baton/internal/config"
)

func TestJobs(t *testing.T) {
	for n, want := range map[int64]string{0: "0 jobs", 1: "1 job", 2: "2 jobs", 1000: "1000 jobs"} {
		if got := Jobs(n); got != want {
			t.Errorf("Jobs(%d) = %q, want %q", n, got, want)
		}
	}
}

// The silence limit is 2C + 4s, C from the schedule key, @every included.
func TestCronSilentAfter(t *testing.T) {
	for spec, want := range map[string]time.Duration{
		"* * * * *":    2*time.Minute + 4*time.Second,
		"*/5 * * * *":  10*time.Minute + 4*time.Second,
		"@hourly":      2*time.Hour + 4*time.Second,
		"@every 1s":    6 * time.Second,
		"@every 30s":   64 * time.Second,
		"@every 1m30s": 3*time.Minute + 4*time.Second,
	} {
		if got := CronSilentAfter(&config.Config{Schedule: spec}); got != want {
			t.Errorf("CronSilentAfter(%q) = %v, want %v", spec, got, want)
		}
	}
}
