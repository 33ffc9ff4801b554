package cli

import (
	"context"
	"fmt"
	"github.com/spf13/pflag"
	"runtime"
	"runtime/debug"
)

const versionUsage = `Usage: baton version [--json]

Print baton's version, the revision it was built from (with ", dirty" when
the tree had uncommitted changes), and the Go version and platform:

  baton v0.2.0 (rev 1a2b3c4, dirty) go1.26.8 linux/amd64

{{flags}}
Example:
  baton version
  baton version --json | jq -r .revision
`

// buildInfo is what baton version prints.
type buildInfo struct {
	Version  string `json:"version"`            // module version, or the one stamped by make release
	Revision string `json:"revision,omitempty"` // VCS revision, in full
	Time     string `json:"time,omitempty"`     // VCS commit time
	Dirty    bool   `json:"dirty"`              // the tree had uncommitted changes
	Go       string `json:"go"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
}

// versionFlags builds version's flag set.
func versionFlags() (*pflag.FlagSet, *jsonOpts) {
	fs := flagSet("version")
	return fs, new(jsonOpts).bind(fs, nil, "print one JSON object")
}

func runVersion(ctx context.Context, e *env, args []string) error {
	fs, o := versionFlags()
	asJSON := &o.asJSON
	if err := parse(e, fs, versionUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("", "version takes no arguments")
	}
	bi, _ := debug.ReadBuildInfo()
	b := readBuild(bi, e.Version)
	if *asJSON {
		return writeJSON(e, b)
	}
	fmt.Fprintln(e.Stdout, b)
	return nil
}

// readBuild reads bi (nil when the binary has none); stamped, when set,
// overrides the module version.
func readBuild(bi *debug.BuildInfo, stamped string) buildInfo {
	b := buildInfo{Version: stamped, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi == nil {
		if b.Version == "" {
			b.Version = "(devel)"
		}
		return b
	}
	if b.Version == "" {
		b.Version = bi.Main.Version
	}
	if b.Version == "" {
		b.Version = "(devel)"
	}
	b.Go = bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Dirty = s.Value == "true"
		}
	}
	return b
}

// String is the one line baton version prints.
func (b buildInfo) String() string {
	s := "baton " + b.Version
	if b.Revision != "" {
		rev := b.Revision[:min(7, len(b.Revision))]
		if b.Dirty {
			rev += ", dirty"
		}
		s += " (rev " + rev + ")"
	}
	return s + " " + b.Go + " " + b.OS + "/" + b.Arch
}
