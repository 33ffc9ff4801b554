package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

const versionUsage = `Usage: baton version

Print baton's version and the Go version it was built with.

Example:
  baton version
`

func runVersion(ctx context.Context, e *env, args []string) error {
	fs := flagSet("version")
	if err := parse(e, fs, versionUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("", "version takes no arguments")
	}
	v := e.Version
	if v == "" {
		v = "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			v = bi.Main.Version
		}
	}
	fmt.Fprintf(e.Stdout, "baton %s %s %s/%s\n", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}
