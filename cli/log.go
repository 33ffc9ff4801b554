package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"sync"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/internal/logbuf"
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
	// raw is the stream itself once newLogger put buf in front of it
	// (Writer is then buf, so plain lines keep their place among the
	// logged ones); Main closes buf.
	raw io.Writer
	buf *logbuf.Writer
}

// flushWait bounds how long an exit waits for the log's last lines, and
// exitFlushWait an exit at once (a second signal, the hard deadline, a
// slot lost): a stalled log reader never holds an exit up.
const (
	flushWait     = time.Second
	exitFlushWait = 250 * time.Millisecond
)

// close flushes the log's buffered lines, waiting at most wait.
func (s *errStream) close(wait time.Duration) {
	if s.buf != nil {
		_ = s.buf.Close(wait) // stalled: the lines are lost, the exit is not
	}
}

// exitNow exits with code at once, after a short flush of the log.
func exitNow(e *env, code int) {
	if s, ok := e.Stderr.(*errStream); ok {
		s.close(exitFlushWait)
	}
	os.Exit(code)
}

// newLogger writes JSON lines, or console lines on a terminal (log_format
// auto); every line carries the queue and the pid.
func newLogger(w io.Writer, c *config.Config) zerolog.Logger {
	return newLoggerFor(w, c, c.Queue)
}

// newLoggerFor is newLogger with the queue every line carries: none when
// queue is "" (baton web, whose lines name the queue they are about).
//
// On Main's stderr, lines go through a logbuf.Writer: a log reader that
// stalls with the pipe open (a stopped `| logger`) then costs lines,
// counted in a later warning, never a goroutine of the holder blocked on
// a write.
func newLoggerFor(w io.Writer, c *config.Config, queue string) zerolog.Logger {
	stream, _ := w.(*errStream)
	if stream != nil {
		w = stream.Writer
		if stream.raw != nil {
			w = stream.raw
		}
	}
	level, err := zerolog.ParseLevel(c.LogLevel)
	if err != nil {
		level = zerolog.InfoLevel
	}
	console := c.LogFormat == "console" || (c.LogFormat == "auto" && isTerminal(w))
	format := func(out io.Writer) io.Writer {
		if console {
			return zerolog.ConsoleWriter{Out: out, TimeFormat: "15:04:05.000"}
		}
		return out
	}
	fields := func(lc zerolog.Context) zerolog.Context {
		if queue != "" {
			lc = lc.Str("queue", queue)
		}
		return lc.Int("pid", os.Getpid())
	}
	if stream != nil {
		if stream.buf == nil {
			stream.raw = w
			stream.buf = logbuf.New(w, logbuf.Options{Notice: func(n uint64) []byte {
				var b bytes.Buffer
				nl := fields(zerolog.New(format(&b)).With().Timestamp()).Logger()
				nl.Warn().Uint64("dropped", n).Msgf("log: dropped %d lines: log reader stalled", n)
				return b.Bytes()
			}})
			stream.Writer = stream.buf
		}
		w = stream.buf
	}
	log := fields(zerolog.New(format(w)).Level(level).With().Timestamp()).Logger()
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
		if s.raw != nil {
			return s.raw
		}
		return s.Writer
	}
	return e.Stderr
}
