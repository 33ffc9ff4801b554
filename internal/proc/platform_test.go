//go:build linux

package proc

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestOtherPlatformsFailClearly: a build for another system stops at this
// package with one error that says why, rather than building a baton that
// fails at run time (or a list of undefined names).
func TestOtherPlatformsFailClearly(t *testing.T) {
	// go test puts its own GOROOT/bin first on the test's PATH.
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to cross-build with")
	}
	for _, goos := range []string{"darwin", "freebsd"} {
		cmd := exec.Command(goBin, "build", "-o", os.DevNull, ".")
		cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH=amd64", "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("GOOS=%s: the build succeeded", goos)
		}
		if !strings.Contains(string(out), "baton runs on Linux only") || strings.Contains(string(out), "undefined") {
			t.Fatalf("GOOS=%s: want one clear error, got:\n%s", goos, out)
		}
	}
}
