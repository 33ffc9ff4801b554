// Command baton runs queue workers from a crontab line: see 'baton --help'.
package main

import (
	"context"
	"os"

	"github.com/baton-run/baton/cli"
)

// version is stamped by make release (-ldflags "-X main.version=v0.2.0");
// empty means the module version from the build info.
var version string

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], cli.Options{Version: version}))
}
