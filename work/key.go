package work

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Keys of jobs (docs/keys.md): a job enqueued with Key(k) waits in k's own
// list; holders take the keys with waiting jobs in turns, and run at most
// the key's cap (KeyCaps) of them at once, fleet-wide.

// keyField carries a job's key in its entry, retry record and dead letter,
// so that a retry, a scheduled job and a requeued dead letter keep it.
// Reserved.
const keyField = "key"

// MaxKeyLen is the longest key, in bytes.
const MaxKeyLen = 256

// MaxKeyCap is the largest per-key cap (key_concurrency, key_limits).
const MaxKeyCap = 10000

// ErrBadKey is a job key baton refuses: empty, longer than MaxKeyLen, not
// UTF-8, or holding '{', '}' or a control character (NUL, newline…).
var ErrBadKey = errors.New("bad job key")

// ValidKey says what is wrong with k as a job key, or nil. Braces are
// refused because they would end the queue's hash tag in a Redis key name
// on some clients, control characters because status and logs print keys
// one per line.
func ValidKey(k string) error {
	switch {
	case k == "":
		return fmt.Errorf("%w: empty", ErrBadKey)
	case len(k) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrBadKey, len(k), MaxKeyLen)
	case !utf8.ValidString(k):
		return fmt.Errorf("%w: not UTF-8", ErrBadKey)
	case strings.ContainsAny(k, "{}"):
		return fmt.Errorf("%w: %q holds '{' or '}'", ErrBadKey, k)
	}
	for _, c := range k {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("%w: %q holds a control character", ErrBadKey, k)
		}
	}
	return nil
}

// Key gives the job a key (a tenant, a customer, a target host): holders
// run at most the key's cap of its jobs at once, fleet-wide, and take keys
// in turns, so one key's backlog does not delay another's jobs. A job with
// a key and no delay waits in its key's own stream, not its level's.
func Key(k string) Option {
	return func(o *jobOptions) error {
		if err := ValidKey(k); err != nil {
			return fmt.Errorf("%w: %w", ErrBadOption, err)
		}
		o.key = k
		return nil
	}
}

// KeyCaps are the per-key caps a holder enforces: Default for every key
// (0: no cap, turns only), Limits for the keys named. Every holder of a
// queue should run with the same caps: each enforces its own view.
type KeyCaps struct {
	Default int
	Limits  map[string]int
}

// uncapped: no key has a cap (turns only).
func (c KeyCaps) uncapped() bool { return c.Default == 0 && len(c.Limits) == 0 }

// of returns k's cap, 0 for none.
func (c KeyCaps) of(k string) int {
	if n, ok := c.Limits[k]; ok {
		return n
	}
	return c.Default
}

// Redis keys of job keys, under the queue's hash tag.

// KeyJobs is the index of keyed jobs: job id → "<entry id>\n<level>\n<key>",
// from when the job enters its key's stream until its holder settles it.
func (k Keys) KeyJobs() string { return k.Stream + ":key:jobs" }

// KeyRing is the list of keys with waiting jobs of level p: the turn order.
func (k Keys) KeyRing(p Priority) string { return k.Stream + ":key:ring:" + p.String() }

// KeyStream is key's stream of jobs of level p: its waiting jobs (not yet
// delivered) and its running ones (pending in the group: a capped key's
// permits are its pending entries).
func (k Keys) KeyStream(p Priority, key string) string {
	return k.Stream + ":key:s:" + p.String() + ":" + key
}

// KeyStreams is the set of the key streams that exist.
func (k Keys) KeyStreams() string { return k.Stream + ":key:streams" }

// keyRingIn is the set of the keys in KeyRing(p): a key joins the ring
// only when it is not in it.
func (k Keys) keyRingIn(p Priority) string { return k.Stream + ":key:in:" + p.String() }

// keyOfStream is the level and key of a key stream, ok false for any other
// name.
func (k Keys) keyOfStream(s string) (p Priority, key string, ok bool) {
	rest, ok := strings.CutPrefix(s, k.Stream+":key:s:")
	if !ok {
		return 0, "", false
	}
	lvl, key, ok := strings.Cut(rest, ":")
	if !ok || lvl == "" || key == "" {
		return 0, "", false
	}
	p, err := ParsePriority(lvl)
	return p, key, err == nil
}

// keyBase is the prefix the key scripts build key names from.
func (k Keys) keyBase() string { return k.Stream + ":key:" }

func (k Keys) rings() []string {
	return []string{k.KeyRing(PriorityHigh), k.KeyRing(PriorityNormal), k.KeyRing(PriorityLow)}
}

// keyEnv is BATON_KEY for an exec job that has a key, else nil.
func (j *Job) keyEnv() []string {
	if j.Key == "" {
		return nil
	}
	return []string{"BATON_KEY=" + j.Key}
}
