package status

import (
	"context"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// KeysShown is how many of the busiest keys status shows.
const KeysShown = 10

// readKeys reads the queue's keys when keyed jobs wait or run, or the
// config caps keys (else nil, at no cost).
func readKeys(ctx context.Context, rdb redis.UniversalClient, cfg *config.Config, c *work.Counts) (*work.KeyReport, error) {
	if c.Keyed == 0 && c.KeyedRunning == 0 && cfg.KeyConcurrency == 0 {
		return nil, nil
	}
	return work.ReadKeys(ctx, rdb, cfg.Queue, cfg.KeyCaps(), KeysShown)
}
