package work

import (
	"fmt"
	"time"

	"github.com/rs/zerolog"
)

// cancel stops a cancelled job on its persistent child: the child gets
// the cancel frame of the delivery (seq), and Grace to answer with any
// result of it (the helpers abort the handler and answer "error"). A
// child that answers stays, for the next job; one that does not, or dies,
// is killed and replaced. Whatever it answers, the job is dead-lettered as
// cancelled (the runner decides: a late result changes nothing).
func (p *Persistent) cancel(c *child, j *Job, seq uint64, log zerolog.Logger) (alive bool, err error) {
	f := frame{Type: frameCancel, ID: j.ID, Seq: seq}
	bufs := f.encode()
	for _, b := range bufs {
		c.queued += int64(len(b)) // counted as sent, as a job frame is (child.started)
	}
	c.send(bufs)
	t := time.NewTimer(p.grace())
	defer t.Stop()
	for {
		select {
		case m, ok := <-c.msgs:
			if !ok {
				return false, fmt.Errorf("child %d, cancelled: %w", c.pid, p.lost(c, "died"))
			}
			if m.Type == frameResult && m.ID == j.ID && (m.Seq == 0 || m.Seq == seq) {
				log.Info().Str("status", m.Status).Msg("persistent child stopped the cancelled job")
				return true, fmt.Errorf("child %d stopped the job: %w", c.pid, ErrCancelled)
			}
			// progress, heartbeats, another delivery's answer: still waiting
		case <-t.C:
			log.Warn().Dur("shutdown_grace", p.grace()).Msg("persistent child did not stop the cancelled job within its grace: killing it")
			p.kill(c)
			return false, fmt.Errorf("child %d killed: %w", c.pid, ErrCancelled)
		}
	}
}

// progressed records a progress frame of the running delivery; a frame
// without pct or out of 0–100 is ignored (logged at debug).
func (p *Persistent) progressed(j *Job, m frame, log zerolog.Logger) {
	if m.Pct == nil {
		log.Debug().Msg("ignored a progress frame without pct")
		return
	}
	if err := j.SetProgress(*m.Pct, m.Msg); err != nil {
		log.Debug().Err(err).Msg("ignored a progress frame")
	}
}
