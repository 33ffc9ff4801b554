package standby

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// parseEvery parses a schedule of one "@every D" spec, for systemd timers
// and tests; ok reports whether specs hold an @every at all.
func parseEvery(specs []string) (s *Schedule, ok bool, err error) {
	for _, spec := range specs {
		body := strings.TrimSpace(spec)
		if !strings.HasPrefix(body, "@every") {
			continue
		}
		if len(specs) > 1 {
			return nil, true, fmt.Errorf("parse schedule %q: @every is not crontab syntax: it stands alone, as a systemd timer's schedule, not with crontab lines", spec)
		}
		d, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(body, "@every")))
		switch {
		case err != nil:
			return nil, true, fmt.Errorf("parse schedule %q: %w", spec, err)
		case d < time.Second || d%time.Second != 0:
			return nil, true, fmt.Errorf("parse schedule %q: %w", spec, errors.New("@every takes whole seconds, at least 1s"))
		}
		return &Schedule{specs: specs, every: d, gap: d, minLines: 1, peakLines: 1}, true, nil
	}
	return nil, false, nil
}

// Every is an "@every D" schedule's D; 0 for crontab lines.
func (s *Schedule) Every() time.Duration { return s.every }
