//go:build linux

package work

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestResultDirsOfGoneHoldersSwept: a holder killed with kill -9 never
// removes its directory of result files; the next holder to run an exec
// job on the machine removes it, and leaves a live holder's alone.
func TestResultDirsOfGoneHoldersSwept(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(tmp, resultDirPrefix+strconv.Itoa(gone.Process.Pid)+"-123")
	live := filepath.Join(tmp, resultDirPrefix+strconv.Itoa(os.Getppid())+"-456")
	other := filepath.Join(tmp, "baton-results-notapid")
	for _, d := range []string{dead, live, other} {
		if err := os.MkdirAll(filepath.Join(d, "x"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	x := &Exec{Argv: []string{"true"}, Logger: testLogger()}
	dir, err := x.resultDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the gone holder's %s is still there (%v)", dead, err)
	}
	for _, d := range []string{live, other, dir} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Close left %s (%v)", dir, err)
	}
}
