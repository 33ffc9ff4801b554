package periodic

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/baton-run/baton/work"
	"github.com/rs/zerolog"
)

// Config is what Start needs.
type Config struct {
	Client  Client
	Queue   string
	Host    string      // this host's name (status compares the hosts' entries)
	Entries []Entry     // checked by Check
	Fence   *work.Fence // the holder's lease in fleet mode, nil with flock slots
	Logger  zerolog.Logger
}

// wakeAfter is how long after a whole second of Redis' clock a round runs:
// ticks fall on whole seconds, and our estimate of Redis' clock is off by
// up to half a round trip.
const wakeAfter = 20 * time.Millisecond

// Start runs a goroutine that claims c's entries' ticks about every second,
// just after each whole second on Redis' clock, one Redis call per round,
// until the returned func is called; that func stops it and waits for it.
// With no entries it starts nothing.
func Start(c Config) (stop func(), err error) {
	if len(c.Entries) == 0 {
		return func() {}, nil
	}
	cl, err := NewClaimer(c.Client, c.Queue, c.Host, c.Entries, c.Fence)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		run(ctx, cl, c.Logger)
	}()
	return func() { cancel(); wg.Wait() }, nil
}

// run is Start's goroutine.
func run(ctx context.Context, cl *Claimer, log zerolog.Logger) {
	var lastErr string
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		unknown := cl.unknown()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		outs, err := cl.Round(rctx)
		cancel()
		wait := time.Until(cl.Now().Truncate(time.Second).Add(time.Second + wakeAfter).Add(-cl.offset))
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if err.Error() != lastErr {
				ev := log.Warn()
				if errors.Is(err, work.ErrFenced) {
					ev = log.Info() // the holder is leaving: its lease is lost
				}
				ev.Err(err).Msg("cannot claim periodic ticks; retrying every second")
			}
			lastErr = err.Error()
			wait = time.Second
		default:
			if lastErr != "" {
				log.Info().Msg("claiming periodic ticks again")
				lastErr = ""
			}
			for _, o := range outs {
				switch o.Kind {
				case Enqueued:
					log.Debug().Str("periodic", o.Entry).Time("tick", o.Tick).Str("job", o.Job).Msg("enqueued periodic job")
				case Missed:
					log.Warn().Str("periodic", o.Entry).Time("tick", o.Tick).Msg("periodic tick missed (claimed too late for its catch_up): not enqueued")
				case Recorded:
					log.Debug().Str("periodic", o.Entry).Time("tick", o.Tick).Msg("new periodic entry: its latest tick is past, recorded; it fires from its next tick")
				case Skipped:
					log.Debug().Str("periodic", o.Entry).Time("tick", o.Tick).Msg("periodic tick skipped: the previous tick's job is still queued (overlap = \"skip\")")
				case NotYet:
					wait = min(wait, 50*time.Millisecond) // our estimate of Redis' clock ran ahead
				}
			}
			if unknown {
				wait = 0 // the records are read: claim at once
			}
		}
		timer.Reset(wait)
	}
}

// unknown reports whether an entry's record was never read.
func (c *Claimer) unknown() bool {
	for _, e := range c.entries {
		if !e.known {
			return true
		}
	}
	return false
}
