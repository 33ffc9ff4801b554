package cli

import (
	"encoding/json"
	"regexp"
	"runtime"
	"runtime/debug"
	"testing"
)

// TestVersionLine: the version line carries the module version (or the
// stamped one), the short revision, the dirty flag, Go and the platform.
func TestVersionLine(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.2.0-dev"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "1a2b3c4d5e6f"}, {Key: "vcs.modified", Value: "true"}, {Key: "vcs.time", Value: "2026-11-23T18:00:00Z"},
	}}
	plat := " " + runtime.GOOS + "/" + runtime.GOARCH
	for _, tc := range []struct {
		bi      *debug.BuildInfo
		stamped string
		want    string
	}{
		{bi, "", "baton v0.2.0-dev (rev 1a2b3c4, dirty) go1.26.8" + plat},
		{bi, "v0.2.0", "baton v0.2.0 (rev 1a2b3c4, dirty) go1.26.8" + plat},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "", "baton (devel) go1.26.8" + plat},
		{nil, "", "baton (devel) " + runtime.Version() + plat},
	} {
		if got := readBuild(tc.bi, tc.stamped).String(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
	out, _, code := mainT(t, "", "version", "--json")
	var b buildInfo
	if code != 0 || json.Unmarshal([]byte(out), &b) != nil || b.Version == "" || b.Go != runtime.Version() || b.OS != runtime.GOOS {
		t.Fatalf("version --json: exit %d\n%s", code, out)
	}
	out, _, _ = mainT(t, "", "version")
	if !regexp.MustCompile(`^baton \S+ (\(rev [0-9a-f]{7}(, dirty)?\) )?go\S+ \w+/\w+\n$`).MatchString(out) {
		t.Fatalf("version: %q", out)
	}
}
