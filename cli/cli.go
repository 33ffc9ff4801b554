// Package cli is the baton command line as a library, so a Go program can
// embed the whole CLI with its own handler instead of exec mode:
//
//	func main() {
//		os.Exit(cli.Main(context.Background(), os.Args[1:], cli.Options{Handler: myHandler}))
//	}
//
// Main owns the process: it reads flags and config, sets up logging, handles
// SIGTERM/SIGINT (first: drain; second: leave now) and maps errors to exit
// codes. The packages below it (lock, standby, work) never see a signal.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/internal/rediserr"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
)

// Exit codes, listed in baton --help.
const (
	ExitOK      = 0 // done, or nothing to do
	ExitRuntime = 1 // runtime error: Redis unreachable, a job system fault
	ExitUsage   = 2 // usage or config error
)

// Options are what an embedding program supplies; zero values mean the
// process's own stdio and environment, and exec mode for run.
type Options struct {
	// Handler runs jobs for `baton run`; nil means exec mode (-- CMD ARGS...).
	Handler work.Handler
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
	Getenv  func(string) string
	// Version is printed by `baton version`; default is the build's module version.
	Version string
}

// env is what every subcommand gets.
type env struct {
	Options
}

// command is one subcommand. Its flag set is built by flags alone, without
// running it, so that completion and the man page show the very flags that
// parse its command line.
type command struct {
	name, summary string
	usage         string                // hand-written help; {{flags}} marks where the flags go
	flags         func() *pflag.FlagSet // a fresh flag set, as run builds it
	words         []string              // what its first argument can be (dead's verbs), for completion
	hidden        bool                  // left out of --help (still in the man page)
	run           func(ctx context.Context, e *env, args []string) error
}

// commands are baton's subcommands, in the order --help lists them. A
// function rather than a variable, because completion and man read it.
func commands() []command {
	return []command{
		{name: "run", summary: "take a slot and work the queue (what cron starts)", usage: runUsage, flags: flagsOf(runFlags), run: runRun},
		{name: "enqueue", summary: "add jobs to the queue", usage: enqueueUsage, flags: flagsOf(newEnqueueFlags), run: runEnqueue},
		{name: "status", summary: "show slots and queue depth", usage: statusUsage, flags: flagsOf(statusFlags), run: runStatus},
		{name: "dead", summary: "list, show, requeue or purge dead letters", usage: deadUsage, flags: flagsOf(deadFlags), words: deadVerbs, run: runDead},
		{name: "queues", summary: "list the queues in the Redis database with their jobs", usage: queuesUsage, flags: flagsOf(queuesFlags), run: runQueues},
		{name: "pause", summary: "stop every holder of the queue starting jobs, until resumed", usage: pauseUsage, flags: flagsOf(pauseFlags), run: runPause},
		{name: "resume", summary: "let a paused queue's holders start jobs again", usage: resumeUsage, flags: flagsOf(resumeFlags), run: runResume},
		{name: "cancel", summary: "cancel jobs: take them out, or stop them where they run", usage: cancelUsage, flags: flagsOf(cancelFlags), run: runCancel},
		{name: "batch", summary: "open, close, show or list batches: jobs with a callback", usage: batchUsage, flags: flagsOf(batchFlags), words: batchVerbs, run: runBatch},
		{name: "job", summary: "say where a job is: waiting, running, retrying, dead", usage: jobUsage, flags: flagsOf(jobFlags), run: runJob},
		{name: "periodic", summary: "list the periodic entries (next tick, last tick and job); forget a retired host", usage: periodicUsage, flags: flagsOf(periodicFlags), words: periodicVerbs, run: runPeriodic},
		{name: "metrics", summary: "print or serve the queue's Prometheus metrics", usage: metricsUsage, flags: flagsOf(metricsFlags), run: runMetrics},
		{name: "web", summary: "serve a read-only dashboard of the queues, slots and dead letters", usage: webUsage, flags: flagsOf(webFlags), run: runWeb},
		{name: "check", summary: "prove a config keeps its slots covered", usage: checkUsage, flags: flagsOf(checkFlags), run: runCheck},
		{name: "simulate", summary: "measure a config's availability in a simulation", usage: simulateUsage, flags: flagsOf(simulateFlags), run: runSimulate},
		{name: "version", summary: "print the version and build", usage: versionUsage, flags: flagsOf(versionFlags), run: runVersion},
		{name: "completion", summary: "print a bash, zsh or fish completion script", usage: completionUsage, flags: bare("completion"), words: shells, run: runCompletion},
		{name: "man", summary: "print the manual page, baton(1), in roff", usage: manUsage, flags: bare("man"), hidden: true, run: runMan},
	}
}

// flagsOf keeps only the flag set of a command's flag builder.
func flagsOf[T any](build func() (*pflag.FlagSet, T)) func() *pflag.FlagSet {
	return func() *pflag.FlagSet { fs, _ := build(); return fs }
}

// bare is the flag set of a command whose only flag is --help.
func bare(name string) func() *pflag.FlagSet {
	return func() *pflag.FlagSet { return flagSet(name) }
}

// parseBare parses the command line of a command built by bare and returns
// its arguments.
func parseBare(e *env, name, usage string, args []string) ([]string, error) {
	fs := flagSet(name)
	if err := parse(e, fs, usage, args); err != nil {
		return nil, err
	}
	return fs.Args(), nil
}

// jsonOpts are the flags of a command that reads the config and can print
// JSON.
type jsonOpts struct {
	cf     *config.Flags // nil when the command reads no config
	asJSON bool
}

func (o *jsonOpts) bind(fs *pflag.FlagSet, cf *config.Flags, usage string) *jsonOpts {
	o.cf = cf
	fs.BoolVar(&o.asJSON, "json", false, usage)
	return o
}

// coverageKeys are the keys check and simulate read: the timings of the
// slots and of the jobs that bound a holder's exit.
var coverageKeys = []string{"queue", config.Slots, "job_timeout", "shutdown_grace", "visibility_timeout", "max_jobs"}

// redisKeys say where Redis is: one server, Sentinel or Cluster.
var redisKeys = []string{"redis_url", "redis_sentinels", "redis_master", "redis_sentinel_password", "redis_sentinel_username", "redis_cluster"}

// checkKeys adds the Redis keys, for check --online.
var checkKeys = append(append([]string{}, redisKeys...), coverageKeys...)

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

const usageHead = `baton - queue workers from a crontab line

Usage:
  baton <command> [flags] [args]

Commands:
`

const usageTail = `
Run 'baton help <command>' (or 'baton <command> --help') for a command's
flags and an example.

Exit codes:
  0  done, or nothing to do (a candidate that found every slot taken)
  1  runtime error (Redis unreachable, lock directory unusable, ...)
  2  usage or config error

Example crontab line (logs to a file, so cron mails nothing):
  * * * * * /usr/local/bin/baton run --config /etc/baton/thumbs.toml -- /usr/local/bin/make-thumbnail >>/var/log/baton/thumbs.log 2>&1
`

func usage(w io.Writer) {
	fmt.Fprint(w, usageHead)
	for _, c := range commands() {
		if !c.hidden {
			fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprint(w, usageTail)
}

// Main runs the baton command line and returns the exit code.
func Main(ctx context.Context, args []string, o Options) int {
	e := &env{o}
	if e.Stdin == nil {
		e.Stdin = os.Stdin
	}
	if e.Stdout == nil {
		e.Stdout = os.Stdout
	}
	if e.Stderr == nil {
		e.Stderr = os.Stderr
	}
	if e.Getenv == nil {
		e.Getenv = os.Getenv
	}
	setupLogging()
	stream := &errStream{Writer: e.Stderr}
	e.Stderr = stream
	if len(args) == 0 {
		usage(e.Stderr)
		return ExitUsage
	}
	switch {
	case args[0] == "help" && len(args) > 1: // baton help run: run's help
		args = []string{args[1], "--help"}
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		usage(e.Stdout)
		return ExitOK
	case args[0] == "-v" || args[0] == "--version":
		args[0] = "version"
	}
	cmd, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(e.Stderr, "baton: unknown command %q\nhint: run 'baton --help' for the list\n", args[0])
		return ExitUsage
	}
	err := cmd.run(ctx, e, args[1:])
	code := report(stream, err)
	stream.close(flushWait)
	return code
}

// usageError is a mistake on the command line; hint says how to fix it.
type usageError struct {
	msg, hint string
}

func (u *usageError) Error() string { return u.msg }

func usagef(hint, format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...), hint: hint}
}

// hintError is a runtime failure (exit 1) with a hint saying what to check;
// err is the cause, for errors.Is and errors.As.
type hintError struct {
	msg, hint string
	err       error
}

func (h *hintError) Error() string { return h.msg }
func (h *hintError) Unwrap() error { return h.err }

// exitError carries an exit code for a failure already reported (or quiet).
type exitError struct {
	code int
	err  error
}

func (x *exitError) Error() string { return x.err.Error() }
func (x *exitError) Unwrap() error { return x.err }

// report prints one line for err (and a hint when there is an obvious fix)
// and returns the exit code. When the command logged JSON lines to w, the
// error is one more JSON line, at level error, with the hint in a field.
func report(w *errStream, err error) int {
	if err == nil || errors.Is(err, pflag.ErrHelp) {
		return ExitOK
	}
	var (
		ue *usageError
		ce *config.Error
		xe *exitError
		he *hintError
		re redis.Error
		ud *lock.UnsafeDirError
	)
	code, hint := ExitRuntime, ""
	switch {
	case errors.As(err, &xe):
		code = xe.code
	case errors.As(err, &ue):
		code, hint = ExitUsage, ue.hint
	case errors.As(err, &he):
		hint = he.hint
	case errors.As(err, &re):
		// A reply from Redis (READONLY, OOM, ...) after connecting.
		_, hint = rediserr.Explain(err, false)
	case errors.As(err, &ce):
		code = ExitUsage
	case errors.As(err, &ud):
		code, hint = ExitUsage, ud.Fix
	case errors.Is(err, lock.ErrUnsafeDir):
		code = ExitUsage
	}
	msg := strings.TrimSpace(err.Error())
	if w.log != nil {
		ev := w.log.Error()
		if hint != "" {
			ev = ev.Str("hint", hint)
		}
		ev.Msg(msg)
		return code
	}
	fmt.Fprintf(w, "baton: %s\n", msg)
	if hint != "" {
		fmt.Fprintf(w, "hint: %s\n", hint)
	}
	return code
}

// flagSet makes a subcommand's flag set; usage text is printed on --help.
func flagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	fs.Usage = func() {}
	fs.SetInterspersed(true)
	fs.BoolP("help", "h", false, "show this help")
	return fs
}

// parse parses args and turns --help and flag mistakes into the right outcome.
func parse(e *env, fs *pflag.FlagSet, text string, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprint(e.Stdout, helpText(fs, text))
			return pflag.ErrHelp
		}
		return usagef("run 'baton "+fs.Name()+" --help'", "%s: %v", fs.Name(), err)
	}
	if h, _ := fs.GetBool("help"); h {
		fmt.Fprint(e.Stdout, helpText(fs, text))
		return pflag.ErrHelp
	}
	return nil
}

// helpText is the hand-written text with the flags spliced in at {{flags}}:
// the command's own flags under "Flags:", then the config keys it binds
// under their groups ("Connection:", "Slots:", ...), each with its default.
func helpText(fs *pflag.FlagSet, text string) string {
	var b strings.Builder
	for i, g := range flagGroups(fs) {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s:\n%s", g.Name(), g.FlagUsagesWrapped(100))
	}
	return strings.Replace(text, "{{flags}}", b.String(), 1)
}

// flagGroups splits fs by group, in the order each group first appears: the
// command's own flags ("Flags"), then the config keys' groups
// ("Connection", "Slots", ...). Each group is a flag set named after it.
func flagGroups(fs *pflag.FlagSet) []*pflag.FlagSet {
	var order []*pflag.FlagSet
	groups := map[string]*pflag.FlagSet{}
	fs.VisitAll(func(f *pflag.Flag) {
		g := "Flags"
		if a := f.Annotations[config.GroupAnnotation]; len(a) > 0 {
			g = a[0]
		}
		if groups[g] == nil {
			groups[g] = pflag.NewFlagSet(g, pflag.ContinueOnError)
			groups[g].SortFlags = false
			order = append(order, groups[g])
		}
		groups[g].AddFlag(f)
	})
	return order
}
