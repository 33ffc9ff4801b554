package cli

import "github.com/baton-run/baton/work"

// keyOption adds --key to opts; a bad key is the caller's mistake (exit 2).
func (f *enqueueFlags) keyOption(opts []work.Option, set bool) ([]work.Option, error) {
	if !set {
		return opts, nil
	}
	if err := work.ValidKey(f.key); err != nil {
		return nil, usagef("a key is 1-256 bytes of UTF-8 without '{', '}' or control characters", "enqueue: --key: %v", err)
	}
	return append(opts, work.Key(f.key)), nil
}
