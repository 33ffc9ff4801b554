package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func simulateJSON(t *testing.T, args ...string) simReport {
	t.Helper()
	out, stderr, code := mainT(t, "", append([]string{"simulate", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep simReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	return rep
}

func TestSimulateText(t *testing.T) {
	out, stderr, code := mainT(t, "", "simulate", "--horizon", "2d", "--standby-slots", "2")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		`queue "default", schedule "* * * * *", 2d simulated, seed 1`,
		"check says PASS", "time with ≥ 1 holder   ", "100.0000%", "longest stretch below 1 ",
		"RUN SLOT", "run.0", "fewest holders in each 1/30", "111111111111111111111111111111",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestSimulateAgreesWithCheck(t *testing.T) {
	// 2 slots fed 4 candidates a minute, short lifetimes: with 2 standby
	// slots it passes check and has no gap, as the oldest standby is
	// promoted first; with 1 it fails standby-slots, and the slot whose
	// holder retires second waits for the next firing.
	args := []string{"--horizon", "5d", "--slots", "2", "--spawn", "4", "--lifetime", "83s", "--jitter", "0s",
		"--standby-wait", "242s", "--shutdown-grace", "36s", "--job-timeout", "81s"}
	good := simulateJSON(t, append(args, "--standby-slots", "2")...)
	bad := simulateJSON(t, append(args, "--standby-slots", "1")...)
	if good.Check != "PASS" || good.Full != 1 || good.Gaps != 0 || good.Timeouts != 0 {
		t.Fatalf("passing config: check %s, full %v, %d gaps, %d time-outs", good.Check, good.Full, good.Gaps, good.Timeouts)
	}
	if bad.Check != "FAIL" || bad.Full == 1 || bad.Gaps == 0 {
		t.Fatalf("failing config: check %s, full %v, %d gaps", bad.Check, bad.Full, bad.Gaps)
	}
	// Standbys that only poll take a freed slot within a poll, not within
	// the wake-up.
	polled := simulateJSON(t, append(args, "--standby-slots", "2", "--poll-only")...)
	if !polled.PollOnly || polled.Full != 1 || polled.FullStrict >= good.FullStrict {
		t.Fatalf("poll-only: full %v, strict %v against %v woken", polled.Full, polled.FullStrict, good.FullStrict)
	}
}

func TestSimulateDeterministic(t *testing.T) {
	args := []string{"--horizon", "1d", "--crash-rate", "2", "--hang-rate", "0.5", "--slots", "2", "--standby-slots", "3"}
	a := simulateJSON(t, append(args, "--seed", "9")...)
	b := simulateJSON(t, append(args, "--seed", "9")...)
	c := simulateJSON(t, append(args, "--seed", "10")...)
	if a.Crashes == 0 || a.Hangs == 0 || a.Full >= 1 {
		t.Fatalf("faults had no effect: %+v", a)
	}
	if a.Full != b.Full || a.Crashes != b.Crashes || a.Promotions != b.Promotions || a.Full == c.Full {
		t.Fatalf("seed 9 twice: %v %v, seed 10: %v", a.Full, b.Full, c.Full)
	}
}

func TestSimulateSVG(t *testing.T) {
	p := filepath.Join(t.TempDir(), "t.svg")
	simulateJSON(t, "--horizon", "2h", "--slots", "2", "--standby-slots", "3", "--svg", p, "--svg-window", "20m")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg ", "baton simulate: slots 2, standby_slots 3", ">run 1<", ">standby 2<", "</svg>"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("svg lacks %q", want)
		}
	}
	_, stderr, code := mainT(t, "", "simulate", "--horizon", "2h", "--svg", filepath.Join(t.TempDir(), "no", "dir", "t.svg"))
	if code != 1 || !strings.Contains(stderr, "write timeline") {
		t.Fatalf("unwritable svg: exit %d %s", code, stderr)
	}
}

func TestSimulateUsage(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"--horizon", "soon"}, `--horizon "soon": want a duration`},
		{[]string{"--horizon", "-1h"}, "must be positive"},
		{[]string{"--crash-rate", "-1"}, "--crash-rate -1: must be a rate"},
		{[]string{"--schedule", "@hourly", "--horizon", "30m"}, "is not longer than the warm-up"},
		{[]string{"--slots", "0"}, "--slots: 0: must be between 1"},
		{[]string{"--schedule", "@every 0s"}, "@every takes whole seconds"},
		{[]string{"x"}, `unexpected argument "x"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, stderr, code := mainT(t, "", append([]string{"simulate"}, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("exit %d, stderr %q; want 2, %q", code, stderr, tc.stderr)
			}
		})
	}
}

func TestParseHorizon(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30d": 30 * 24 * time.Hour, "1d12h": 36 * time.Hour, "90m": 90 * time.Minute, "0d1s": time.Second,
	} {
		if got, err := parseHorizon(in); err != nil || got != want {
			t.Errorf("parseHorizon(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "d", "xd", "1.5d", "-1d", "0d", "1d-2h", "99999d"} {
		if _, err := parseHorizon(in); err == nil {
			t.Errorf("parseHorizon(%q) accepted", in)
		}
	}
}

func TestSimulateArrivals(t *testing.T) {
	out, stderr, code := mainT(t, "", "simulate", "--json", "--slots", "4", "--min-slots", "1", "--arrivals", "20000@10s", "--job-time", "5ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep scaleSimReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	on, off := rep.Autoscale, rep.Off
	if on.Jobs != 20000 || on.MostHolders != 4 || off.MostHolders != 1 || on.Started != 3 || on.Left != 3 || on.Window != off.Window {
		t.Fatalf("%+v", rep)
	}
	dOn, _ := time.ParseDuration(on.Drained)
	dOff, _ := time.ParseDuration(off.Drained)
	if (dOn-10*time.Second)*3 > dOff-10*time.Second {
		t.Fatalf("drained at %s with autoscaling, %s without: want the burst ≥ 3× faster", dOn, dOff)
	}
	for _, bad := range [][]string{{"--arrivals", "lots"}, {"--arrivals", "10@1s", "--job-time", "0s"}} {
		if _, stderr, code := mainT(t, "", append([]string{"simulate"}, bad...)...); code != 2 || !strings.Contains(stderr, "simulate: --") {
			t.Errorf("%v: exit %d, %s", bad, code, stderr)
		}
	}
}
