package cli

import (
	"context"
	"io"
	"os"
	"sync"

	"github.com/baton-run/baton/internal/config"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// logTimeFormat is RFC 3339 with milliseconds, in JSON and console lines.
const logTimeFormat = "2006-01-02T15:04:05.000Z07:00"

var setupOnce sync.Once

// setupLogging sets the process-wide logging choices, once, from Main:
// timestamps with milliseconds, durations as strings with units ("1.5s"),
// and go-redis's own log lines dropped (the error that matters comes back
// from the call and is reported once, redacted).
func setupLogging() {
	setupOnce.Do(func() {
		zerolog.TimeFieldFormat = logTimeFormat
		zerolog.DurationFieldFormat = zerolog.DurationFormatString
		redis.SetLogger(quietRedis{})
	})
}

// quietRedis drops go-redis's log lines.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// errStream is Main's stderr. When a command logs JSON lines to it,
// newLogger leaves the logger here, so that report writes the command's
// fatal error as one more JSON line instead of plain text among them.
type errStream struct {
	io.Writer
	log *zerolog.Logger // set when logs on this stream are JSON lines
}

// newLogger writes JSON lines, or console lines on a terminal (log_format
// auto); every line carries the queue and the pid.
func newLogger(w io.Writer, c *config.Config) zerolog.Logger {
	return newLoggerFor(w, c, c.Queue)
}

// newLoggerFor is newLogger with the queue every line carries: none when
// queue is "" (baton web, whose lines name the queue they are about).
func newLoggerFor(w io.Writer, c *config.Config, queue string) zerolog.Logger {
	stream, _ := w.(*errStream)
	if stream != nil {
		w = stream.Writer
	}
	level, err := zerolog.ParseLevel(c.LogLevel)
	if err != nil {
		level = zerolog.InfoLevel
	}
	console := c.LogFormat == "console" || (c.LogFormat == "auto" && isTerminal(w))
	if console {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000"}
	}
	lc := zerolog.New(w).Level(level).With().Timestamp()
	if queue != "" {
		lc = lc.Str("queue", queue)
	}
	log := lc.Int("pid", os.Getpid()).Logger()
	if stream != nil && !console {
		stream.log = &log
	}
	return log
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// rawStderr is the stderr stream itself (not its errStream), for a
// progress line, which draws only when it is a terminal.
func rawStderr(e *env) io.Writer {
	if s, ok := e.Stderr.(*errStream); ok {
		return s.Writer
	}
	return e.Stderr
}
