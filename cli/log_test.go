package cli

import (
	"bytes"
	"regexp"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/config"
)

// TestLogLine: JSON log lines carry millisecond timestamps and durations
// with their unit.
func TestLogLine(t *testing.T) {
	setupLogging()
	var buf bytes.Buffer
	cfg := config.Default()
	cfg.LogFormat = "json"
	log := newLogger(&buf, &cfg)
	log.Info().Dur("wait", 1500*time.Millisecond).Msg("x")
	want := regexp.MustCompile(`^\{"level":"info","queue":"default","pid":\d+,"wait":"1.5s","time":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)","message":"x"\}\n$`)
	if !want.Match(buf.Bytes()) {
		t.Fatalf("log line %s", buf.Bytes())
	}
}
