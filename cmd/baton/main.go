// Command baton runs queue workers from a crontab line: see 'baton --help'.
package main

import (
	"context"
	"os"

	"github.com/baton-run/baton/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], cli.Options{}))
}
