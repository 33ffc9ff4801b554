package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"
)

// drainOnSignal returns a context cancelled by the first SIGTERM or SIGINT
// (drain: finish in-flight jobs, exit 0). A second one calls leave, which
// kills running jobs and exits at once. SIGHUP is ignored: a holder outlives the terminal that
// started it. The returned func stops listening.
func drainOnSignal(ctx context.Context, log zerolog.Logger, leave func()) (context.Context, func()) {
	signal.Ignore(syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			log.Info().Str("signal", s.String()).Msg("draining: in-flight jobs finish, then exit (signal again to exit now)")
			cancel()
		case <-done:
			return
		}
		select {
		case s := <-ch:
			log.Warn().Str("signal", s.String()).Msg("second signal: killing jobs and exiting now")
			leave()
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel()
	}
}

// surviveBrokenLog keeps a log reader that dies (`2>&1 | logger` killed or
// restarted) from killing the process: Go dies of SIGPIPE on a write to a
// broken pipe on fd 1 or 2 unless SIGPIPE is notified, and then the write
// only fails (EPIPE) and the line is lost. Notified, not ignored: an
// ignored SIGPIPE would be inherited by every job across exec, a handled
// one is reset to the default there. For the life of the process.
func surviveBrokenLog() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}
