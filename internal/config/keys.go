package config

import (
	"fmt"
	"maps"
	"slices"

	"github.com/baton-run/baton/work"
)

// validateKeys checks key_concurrency and [key_limits].
func (c *Config) validateKeys() error {
	if c.KeyConcurrency < 0 || c.KeyConcurrency > work.MaxKeyCap {
		return &Error{Key: "key_concurrency", Msg: fmt.Sprintf("%d: must be between 0 (no cap) and %d", c.KeyConcurrency, work.MaxKeyCap)}
	}
	if len(c.KeyLimits) == 0 {
		return nil
	}
	if c.KeyConcurrency == 0 {
		return &Error{Key: "key_limits", Msg: "set key_concurrency too: the cap of the keys not listed (key_limits alone would leave them uncapped by mistake)"}
	}
	keys := slices.Sorted(maps.Keys(c.KeyLimits))
	for _, k := range keys {
		if err := work.ValidKey(k); err != nil {
			return &Error{Key: "key_limits", Msg: err.Error()}
		}
		if n := c.KeyLimits[k]; n < 1 || n > work.MaxKeyCap {
			return &Error{Key: "key_limits", Msg: fmt.Sprintf("%q = %d: must be between 1 and %d", k, n, work.MaxKeyCap)}
		}
	}
	return nil
}

// KeyCaps are the per-key caps for the job loop.
func (c *Config) KeyCaps() work.KeyCaps {
	return work.KeyCaps{Default: c.KeyConcurrency, Limits: c.KeyLimits}
}
