package work

import (
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fields of a periodic job's entry (package periodic), reserved like
// payload and priority: the tick it was enqueued for (RFC 3339, the
// scheduled time in the entry's time zone) and the entry's name. A holder
// gives them to the job as Job.Tick and Job.Periodic, and to exec and
// persistent children as BATON_TICK and BATON_PERIODIC.
const (
	TickField     = "tick"
	PeriodicField = "periodic"
)

// EntryFields returns the field/value strings Enqueue writes into a job's
// stream entry for payload and opts, in the same order, and the job's
// level: a producer that adds the entry itself, in a script of its own
// (package periodic's claim), writes what Enqueue would. Options that do not
// end in the stream at once (In, At, UniqueKey, UniqueFor) are refused.
func EntryFields(payload []byte, opts ...Option) ([]string, Priority, error) {
	var o jobOptions
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, 0, err
		}
	}
	if !o.due.IsZero() || o.uniqueFor > 0 || len(o.after) > 0 {
		return nil, 0, fmt.Errorf("%w: a delay, a unique key's TTL or After cannot be written as entry fields", ErrBadOption)
	}
	f := []string{PayloadField, string(payload)}
	if o.unique != "" {
		f = append(f, uniqueField, o.unique)
	}
	if o.maxAttempts > 0 {
		f = append(f, maxAttemptsField, strconv.Itoa(o.maxAttempts))
	}
	if o.timeout > 0 {
		f = append(f, timeoutField, strconv.FormatInt(o.timeout.Milliseconds(), 10))
	}
	if o.priority != PriorityNormal {
		f = append(f, priorityField, o.priority.String())
	}
	if o.key != "" {
		f = append(f, keyField, o.key)
	}
	return f, o.priority, nil
}

// FencedScript returns body preceded by the fence check the holder's own
// write scripts make: called with the lease key appended to KEYS and the
// token to ARGV (both taken off before body runs), it refuses with an error
// starting "FENCED" (IsFenced) unless the lease still carries the token and
// has not expired on Redis' clock, before body writes anything.
func FencedScript(body string) *redis.Script { return redis.NewScript(fenceLua + body) }

// tickOf reads a periodic job's tick and entry name, when its entry has
// them: one map lookup for any other job.
func (j *Job) tickOf(values map[string]any) {
	s, ok := values[TickField].(string)
	if !ok {
		return
	}
	j.Tick, _ = time.Parse(time.RFC3339, s)
	j.Periodic, _ = values[PeriodicField].(string)
}

// tickEnv is BATON_TICK and BATON_PERIODIC for a periodic job, else nil.
func (j *Job) tickEnv() []string {
	if j.Periodic == "" {
		return nil
	}
	return []string{"BATON_TICK=" + j.Tick.Format(time.RFC3339), "BATON_PERIODIC=" + j.Periodic}
}

// jobFrame is the worker protocol's job frame for j: a periodic job's
// carries its tick and entry name.
func jobFrame(j *Job) frame {
	f := frame{Type: frameJob, ID: j.ID, Attempt: j.Attempt, Queue: j.Queue, Periodic: j.Periodic, Key: j.Key, body: j.Payload}
	if j.Periodic != "" {
		f.Tick = j.Tick.Format(time.RFC3339)
	}
	f.Traceparent, f.Tracestate = j.TraceParent()
	j.batchFrame(&f)
	return f
}
