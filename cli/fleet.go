package cli

import (
	"github.com/baton-run/baton/holder"
	"time"

	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/lock"
	"github.com/redis/go-redis/v9"
)

// slotSets builds the run set and, when standby_slots > 0, the standby set
// (nil otherwise) of cfg's lock backend (holder.SlotSets), once per process:
// the lease sets share one small client of their own, apart from the job
// loop's, so that renewals never queue behind job traffic; it connects on
// first use and lives as long as the process.
func slotSets(cfg *config.Config) (run, sb lock.Set, err error) {
	var rdb redis.UniversalClient // nil: flock files
	if cfg.LockBackend == "redis" {
		c, err := leaseClient(cfg)
		if err != nil {
			return nil, nil, err
		}
		rdb = c
	}
	return holder.SlotSets(cfg, rdb)
}

// leaseClient is the lease sets' client. Each lease call bounds itself
// with its context (a renewal: the time left before its renew deadline), so
// the client's own timeouts are only a backstop at the renew deadline: a
// slow link's late reply still counts (a per-call timeout of a quarter of
// the deadline fenced healthy holders on a 2.7s round trip), and a dead
// connection is retried once.
func leaseClient(cfg *config.Config) (redis.UniversalClient, error) {
	d := max(lock.DeadlineFor(cfg.LeaseTTL.D()), 50*time.Millisecond)
	return newClient(cfg, clientOpts{pool: 4, dial: d, io: d, retries: 1, lean: true, ctxTimeout: true})
}

// hostCap takes one of this host's max_per_host permits (flock files
// <queue>.host.<i> in lock_dir) before anything asks Redis: (nil, true) when
// there is no cap, (nil, false) when the host is full.
func hostCap(cfg *config.Config) (lock.Slot, bool, error) {
	if cfg.LockBackend != "redis" || cfg.MaxPerHost == 0 {
		return nil, true, nil
	}
	s, err := lock.NewFileSet(cfg.LockDir, cfg.Queue, lock.RoleHost, cfg.MaxPerHost)
	if err != nil {
		return nil, false, err
	}
	return s.TryAcquire()
}
