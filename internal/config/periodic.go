package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/baton-run/baton/periodic"
	"github.com/baton-run/baton/work"
)

// PeriodicEntries checks the [[periodic]] entries and returns them ready for
// package periodic, defaults filled in. A bad one is an *Error naming the
// entry and the key.
func (c *Config) PeriodicEntries() ([]periodic.Entry, error) {
	out := make([]periodic.Entry, len(c.Periodic))
	for i, p := range c.Periodic {
		bad := func(k, format string, a ...any) error {
			return entryErr(i, p.Name, k, fmt.Sprintf(format, a...))
		}
		e := periodic.Entry{Name: p.Name, Schedule: p.Schedule, Payload: []byte(p.Payload), Timeout: p.Timeout.D(),
			MaxAttempts: p.MaxAttempts, CatchUp: periodic.CatchUp(p.CatchUp), CatchUpMax: p.CatchUpMax, Overlap: p.Overlap}
		if p.PayloadBase64 != "" {
			if p.Payload != "" {
				return nil, bad("payload_base64", "set with payload: use one of the two")
			}
			b, err := base64.StdEncoding.DecodeString(p.PayloadBase64)
			if err != nil {
				return nil, bad("payload_base64", "not base64: %v", err)
			}
			e.Payload = b
		}
		if len(e.Payload) > c.MaxPayload {
			return nil, bad("payload", "%d bytes: over max_payload (%d)", len(e.Payload), c.MaxPayload)
		}
		pr, err := work.ParsePriority(p.Priority)
		if err != nil {
			return nil, bad("priority", "%q: want high, normal or low", p.Priority)
		}
		e.Priority = pr
		if p.Key != "" {
			if err := work.ValidKey(p.Key); err != nil {
				return nil, bad("key", "%v", err)
			}
			e.Key = p.Key
		}
		if p.Timeout.D() < 0 || p.Timeout.D() > 0 && p.Timeout.D() < time.Millisecond {
			return nil, bad("timeout", "%s: must be at least 1ms (or unset for job_timeout)", p.Timeout)
		}
		if p.CatchUpMax < 0 {
			return nil, bad("catch_up_max", "%d: must be between 1 and %d", p.CatchUpMax, periodic.MaxCatchUp)
		}
		out[i] = e
	}
	if err := periodic.Check(out); err != nil {
		var ee *periodic.EntryError
		if errors.As(err, &ee) {
			return nil, entryErr(ee.Index, ee.Name, ee.Key, ee.Msg)
		}
		return nil, err
	}
	return out, nil
}

// entryErr is an *Error on key k of the i-th (0-based) entry, named when it
// has a name.
func entryErr(i int, name, k, msg string) *Error {
	who := fmt.Sprintf("periodic entry %d", i+1)
	if name != "" {
		who = fmt.Sprintf("periodic %q", name)
	}
	return &Error{Key: who + ": " + k, Msg: msg, entry: i + 1, entryKey: k}
}
