package work

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// keyScanPage is how many key streams one pass takes from the set at once:
// one SSCAN, then one pipeline of an XLEN and an XPENDING summary each.
const keyScanPage = 500

// keyStreamsPending lists the key streams (as entryKeys without id), by
// level (high, normal, low), that hold entries pending for this consumer
// (mine: to replay) or for anyone (to claim those idle past the visibility
// timeout), in one pass over the set of key streams (KeyStreams). It
// deletes on the way the key streams it finds with no entry left, which
// the settle paths other than the ack (retry, dead letter, cancel) leave,
// and takes the names of streams gone out of the set (keySweepScript:
// atomic with an enqueue that adds to one meanwhile).
func (r *runner) keyStreamsPending(ctx context.Context, mine bool) ([]entryKey, error) {
	var out []entryKey
	err := scanKeyStreams(ctx, r.c.Client, r.keys, keyScanPage, func(names []string) (bool, error) {
		found, err := r.keyStreamsIn(ctx, names, mine)
		out = append(out, found...)
		return true, err
	})
	if err != nil {
		return nil, err
	}
	// SSCAN may return a name twice
	slices.SortFunc(out, func(a, b entryKey) int {
		if c := levelIndex(a.level) - levelIndex(b.level); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	return slices.Compact(out), nil
}

// keyStreamsIn is keyStreamsPending for one page of names.
func (r *runner) keyStreamsIn(ctx context.Context, names []string, mine bool) ([]entryKey, error) {
	var out []entryKey
	var empty []string
	for _, l := range lookKeyStreams(ctx, r.c.Client, r.keys, names) {
		n, err := l.n.Result()
		if err != nil {
			return nil, fmt.Errorf("length of key stream %s: %w", l.name, err)
		}
		if n == 0 {
			empty = append(empty, l.name)
			continue
		}
		sum, err := l.pend.Result()
		switch {
		case isNoGroup(err):
			continue // entries and no group: not read through baton's group yet
		case err != nil:
			return nil, fmt.Errorf("pending entries of key stream %s: %w", l.name, err)
		case mine && sum.Consumers[r.c.Consumer] > 0, !mine && sum.Count > 0:
			out = append(out, l.at)
		}
	}
	if len(empty) > 0 {
		// A failure here deletes nothing, and the next pass tries again.
		if err := runScript(ctx, r.c.Client, keySweepScript, empty).Err(); err != nil {
			r.c.Logger.Debug().Err(err).Int("streams", len(empty)).Msg("delete empty key streams")
		}
	}
	return out, nil
}
