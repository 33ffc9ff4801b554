package cli

import (
	"io"
	"os"

	"github.com/baton-run/baton/internal/config"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// newLogger writes JSON lines, or console lines on a terminal (log_format
// auto); every line carries the queue and the pid.
func newLogger(w io.Writer, c *config.Config) zerolog.Logger {
	level, err := zerolog.ParseLevel(c.LogLevel)
	if err != nil {
		level = zerolog.InfoLevel
	}
	if c.LogFormat == "console" || (c.LogFormat == "auto" && isTerminal(w)) {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000"}
	}
	return zerolog.New(w).Level(level).With().Timestamp().
		Str("queue", c.Queue).Int("pid", os.Getpid()).Logger()
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
