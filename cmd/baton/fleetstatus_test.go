package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestFleetRedisUnreachable: with lock_backend redis and Redis down, a
// candidate exits 1 with the error naming Redis (password hidden) and a
// hint, as with flock slots; status exits 1 and says the slots are
// unknown rather than showing them free (they are leases in Redis).
func TestFleetRedisUnreachable(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	url := "redis://:hunter2@127.0.0.1:1/0"
	cmd := r.cmd(r.fleetArgs("h1", "--redis-url", url, "--log-format", "json", "--", "/bin/true")...)
	var errb strings.Builder
	cmd.Stderr = &errb
	_ = cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("run exit %d, want 1: %s", code, errb.String())
	}
	var line struct{ Level, Message, Hint string }
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &line) != nil || line.Level != "error" ||
		line.Message != "redis at redis://:xxxxx@127.0.0.1:1/0: connection refused" || line.Hint == "" ||
		strings.Contains(errb.String(), "hunter2") {
		t.Fatalf("run stderr %q", errb.String())
	}

	out, errOut, code := r.baton("status", "--lock-backend", "redis", "--redis-url", url)
	if code != 1 || !strings.Contains(out, "slots unknown") || strings.Contains(out, "free") {
		t.Errorf("status exit %d (want 1):\n%s%s", code, out, errOut)
	}
	out, _, code = r.baton("status", "--json", "--lock-backend", "redis", "--redis-url", url)
	var st struct {
		Run, Standby []slotJSON
		Error        string
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 1 || len(st.Run)+len(st.Standby) != 0 || st.Error == "" {
		t.Errorf("status --json exit %d (want 1, no slots, an error): %v\n%s", code, err, out)
	}
}
