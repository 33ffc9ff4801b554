package cli_test

import (
	"context"
	"fmt"
	"os"

	"github.com/baton-run/baton/cli"
	"github.com/baton-run/baton/work"
)

// A Go program embeds the whole CLI with its own handler: crontab runs this
// program's `run` subcommand instead of `baton run -- CMD`.
func ExampleMain() {
	resize := work.HandlerFunc(func(ctx context.Context, j *work.Job) error {
		fmt.Printf("resizing %s (attempt %d)\n", j.Payload, j.Attempt)
		return nil
	})
	// os.Exit(cli.Main(context.Background(), os.Args[1:], cli.Options{Handler: resize}))
	code := cli.Main(context.Background(), []string{"run", "--slots", "0"}, cli.Options{Handler: resize, Stderr: os.Stdout})
	fmt.Println("exit", code)
	// Output:
	// baton: flag --slots: 0: must be between 1 and 1024
	// exit 2
}
